# mk/soak.mk - `make soak`: tests/integ/soak.py, a leak watch under mixed load
# (not part of `make test` or CI: it takes ten minutes).
#
# One private redis-server, two admitd on it, client threads for
# SOAK_SECONDS (default 600) with a Redis restart halfway; RSS, fds, keys and
# leases of each daemon and Redis's DBSIZE and used_memory sampled every 10 s,
# and checked back in their starting band once every TTL has passed. Prints
# the table and a verdict, writes tests/bench/results/soak.json, fails on a
# band violation, a malformed reply, a dead daemon or a sanitizer report.
#
#   make soak                  10 minutes
#   make soak SOAK_SECONDS=60  shorter

SOAK_SECONDS ?= 600

.PHONY: soak
soak: all
	ADMITD_BIN=$(CURDIR)/daemon/admitd $(PYTHON) -m tests.integ.soak $(SOAK_SECONDS)
