# mk/bench.mk - what `make bench` needs besides the daemon: the load
# generator (tests/bench/loadgen) and the Unix echo server (tests/bench/echo).
#
# `make bench` (in the Makefile) runs tests/bench/run.py, which needs the
# daemon and these binaries; both are stdlib C only (no libadmitd.a), and are
# built with the project's warnings but never sanitized: they measure.
# run.py also uses, when present: redis-server and redis-benchmark (required),
# valgrind (the callgrind figure), gnuplot (the picture), node and npm
# (rate-limiter-flexible, installed by `npm ci` from tests/bench/peers/
# package-lock.json into tests/bench/peers/node_modules), and Debian's
# python3-limits and python3-redis (the `limits` peer, run by /usr/bin/python3).
# Each missing one is a row saying "skipped: ...".

BENCH_LOADGEN := tests/bench/loadgen
BENCH_ECHO    := tests/bench/echo
BENCH_CFLAGS   = -std=c11 -D_GNU_SOURCE -g -O2 $(WARN) $(CFLAGS)

$(BENCH_LOADGEN): tests/bench/loadgen.c
	$(CC) $(BENCH_CFLAGS) -o $@ $<

$(BENCH_ECHO): tests/bench/echo.c
	$(CC) $(BENCH_CFLAGS) -o $@ $<

bench: $(BENCH_LOADGEN) $(BENCH_ECHO)

.PHONY: clean-bench
clean: clean-bench
clean-bench:
	rm -f $(BENCH_LOADGEN) $(BENCH_ECHO)
