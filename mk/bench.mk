# mk/bench.mk - the benchmark load generator (tests/bench/loadgen).
#
# `make bench` (in the Makefile) runs tests/bench/run.py, which needs the
# daemon and this binary; the loadgen is stdlib C only (no libadmitd.a), and
# is built with the project's warnings but never sanitized: it measures.

BENCH_LOADGEN := tests/bench/loadgen

$(BENCH_LOADGEN): tests/bench/loadgen.c
	$(CC) -std=c11 -D_GNU_SOURCE -g -O2 $(WARN) $(CFLAGS) -o $@ $<

bench: $(BENCH_LOADGEN)

.PHONY: clean-bench
clean: clean-bench
clean-bench:
	rm -f $(BENCH_LOADGEN)
