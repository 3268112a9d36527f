"""admit - the Python client for admitd (per-pod admission control).

    import admit

    client = admit.Client()            # socket: arg, $ADMITD_SOCKET, default
    with client.acquire("llm", "gpt", timeout=5) as lease:
        ...                            # call the upstream
        lease.tokens = {"input": 300, "output": 200}

    try:
        client.try_acquire("crawl", url="https://Example.com/x").release()
    except admit.Limited as e:
        time.sleep(e.retry_after)

    client.admit("api", "acme")        # a plain rate limit: nothing to release

AsyncClient (admit.aio) has the same API for asyncio.
"""

from ._proto import DEFAULT_SOCKET, SOCKET_ENV, Admission, url_host
from .aio import AsyncClient, AsyncLease
from .client import Client, Lease
from .errors import (
    AdmitError,
    BadRequest,
    BudgetExceeded,
    Canceled,
    ExceedsLimit,
    Forbidden,
    Limit,
    Limited,
    ShuttingDown,
    Timeout,
    TooManyWaiters,
    Unavailable,
    UnknownScope,
)

__version__ = "0.1.0"

__all__ = [
    "Client",
    "Lease",
    "AsyncClient",
    "AsyncLease",
    "Admission",
    "AdmitError",
    "Limit",
    "Limited",
    "BudgetExceeded",
    "Timeout",
    "Unavailable",
    "UnknownScope",
    "BadRequest",
    "ShuttingDown",
    "TooManyWaiters",
    "ExceedsLimit",
    "Canceled",
    "Forbidden",
    "DEFAULT_SOCKET",
    "SOCKET_ENV",
    "url_host",
]
