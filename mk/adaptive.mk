# mk/adaptive.mk - `make bench-adaptive`: the adaptive judge as a picture.
#
# Runs tests/bench/adaptive.py (three admitd on one redis-server, 24 crawler
# threads, nginx limit_req at 18 r/s then 36 r/s) and writes docs/adaptive.png
# with gnuplot. Needs nginx (Debian nginx-light) and gnuplot (gnuplot-nox).
# BENCH_ADAPTIVE_SECONDS (default 60) sets the length of the run.

.PHONY: bench-adaptive
bench-adaptive: all
	ADMITD_BIN=$(CURDIR)/daemon/admitd $(PYTHON) tests/bench/adaptive.py \
	  --seconds $(or $(BENCH_ADAPTIVE_SECONDS),60) --out docs/adaptive.png
