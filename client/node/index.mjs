// The ES module face of admitd-client: the same objects as index.js.
import cjs from './index.js';

export const {
  Client,
  Admission,
  Lease,
  AdmitError,
  Limited,
  BudgetExceeded,
  Timeout,
  Unavailable,
  UnknownScope,
  BadRequest,
  ShuttingDown,
  TooManyWaiters,
  ExceedsLimit,
  Forbidden,
  Canceled,
  AbortError,
  errorFromReply,
  urlHost,
  outcomeFor,
  asyncDispose,
  DEFAULT_SOCKET,
  SOCKET_ENV,
  VERSION,
} = cjs;

export default cjs;
