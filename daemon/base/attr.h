/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * attr.h - the compiler attributes every layer may use.
 */

#ifndef ADMITD_ATTR_H
#define ADMITD_ATTR_H

#define MUST_CHECK __attribute__((warn_unused_result))
#define UNUSED	   __attribute__((unused))

#endif
