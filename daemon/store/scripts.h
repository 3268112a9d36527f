/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * scripts.h - the Lua scripts embedded at build time (daemon/store/scripts_gen.c,
 * generated from the scripts/ directory by daemon/store/gen_scripts.sh).
 *
 * script_sources[i] is the full text of scripts/<script_names[i]>.lua with
 * every scripts/lib/ file prepended; both arrays end with NULL.
 */

#ifndef ADMITD_SCRIPTS_H
#define ADMITD_SCRIPTS_H

#include <stddef.h>

extern const char *const script_sources[];
extern const char *const script_names[];
extern const size_t script_count;

/*
 * script_library is every script as one Redis function library (for
 * FUNCTION LOAD), named script_library_name; script_functions[i] is the
 * function of script_sources[i] in it (for FCALL). Same scripts, same
 * KEYS and ARGV: only how Redis is asked to run them differs.
 */
extern const char script_library_name[];
extern const char script_library[];
extern const char *const script_functions[];

/* script_index - position of a script by name, or -1. */
int script_index(const char *name);

#endif
