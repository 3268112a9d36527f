# admitd - one non-recursive Makefile for the daemon, its tests and clients.
#
#   make            build daemon/admitd, the client library and the admit CLI
#   make test       unit tests (check), integration tests (real redis-server
#                   and the real daemon), client tests
#   make test SANITIZE=1   the same under AddressSanitizer + UBSan
#   make valgrind   the unit and integration suites under valgrind
#
# User CFLAGS/LDFLAGS are appended to ours, never replace them.

CC       ?= cc
OPT      ?= -O2
PREFIX   ?= /usr/local
PYTHON   ?= python3
VERSION  := 0.1.0

PKGS      = libevent libevent_openssl openssl hiredis jansson inih
WARN      = -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
            -Wwrite-strings -Wformat=2 -Wvla -Wno-format-nonliteral
# The daemon's folders, one per layer, bottom to top (daemon/LAYERS says what
# each owns and may include; `make layers` checks it). Headers are included
# by name, so every folder is on the include path.
DAEMON_DIRS = daemon/base daemon/strategy daemon/redis_client daemon/conf daemon/wire \
            daemon/limiter daemon/queue daemon/local daemon/store daemon/decision daemon/ops \
            daemon/front daemon
DAEMON_INC  = $(addprefix -I,$(DAEMON_DIRS))
BASE_CFLAGS = -std=c11 -D_GNU_SOURCE -g $(OPT) $(WARN) -MMD -MP -fPIC \
            $(DAEMON_INC) -Iproto -DADMITD_VERSION='"$(VERSION)"' \
            $(shell pkg-config --cflags $(PKGS))
BASE_LDLIBS = $(shell pkg-config --libs $(PKGS)) -lm

ifeq ($(SANITIZE),1)
BASE_CFLAGS  += -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
BASE_LDFLAGS += -fsanitize=address,undefined
endif

ALL_CFLAGS  = $(BASE_CFLAGS) $(CFLAGS)
ALL_LDFLAGS = $(BASE_LDFLAGS) $(LDFLAGS)

DAEMON_SRCS := $(filter-out daemon/main.c daemon/store/scripts_gen.c, \
               $(wildcard $(addsuffix /*.c,$(DAEMON_DIRS)))) daemon/store/scripts_gen.c
DAEMON_OBJS := $(DAEMON_SRCS:.c=.o)
LUA_SRCS    := $(sort $(wildcard scripts/*.lua scripts/lib/*.lua))

# Unit tests live by the daemon folder they test: tests/unit/ROOM/check_*.c,
# ROOM a folder of daemon/ (process: daemon/ itself, as in daemon/LAYERS).
CHECK_SRCS  := $(sort $(wildcard tests/unit/*/check_*.c))
CHECK_BINS  := $(CHECK_SRCS:.c=)
CHECK_LIBS  := $(shell pkg-config --libs check)

DEPS := $(DAEMON_OBJS:.o=.d) daemon/main.d $(CHECK_SRCS:.c=.d)

.PHONY: all run test test-unit test-integ test-client valgrind clean install install-python \
        format format-check lint bench readme-check chaos layers
all: daemon/admitd

# Build everything and run admitd in the foreground on the example conf
# (local mode: no Redis needed). Ctrl-C stops it.
run: all
	./daemon/admitd -c conf/admitd.conf

daemon/libadmitd.a: $(DAEMON_OBJS)
	rm -f $@
	ar rcs $@ $^

daemon/admitd: daemon/main.o daemon/libadmitd.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(BASE_LDLIBS)

daemon/store/scripts_gen.c: daemon/store/gen_scripts.sh $(LUA_SRCS)
	sh daemon/store/gen_scripts.sh $(LUA_SRCS) > $@.tmp && mv $@.tmp $@

%.o: %.c
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(CHECK_BINS): %: %.c daemon/libadmitd.a
	$(CC) $(ALL_CFLAGS) $(ALL_LDFLAGS) -o $@ $< daemon/libadmitd.a $(CHECK_LIBS) $(BASE_LDLIBS)

-include client/client.mk
-include $(wildcard mk/*.mk)

test: test-unit test-integ test-client

test-unit: $(CHECK_BINS)
	@set -e; for t in $(CHECK_BINS); do echo "== $$t"; $(TEST_PREFIX) ./$$t; done

test-integ: all
	ADMITD_BIN=$(CURDIR)/daemon/admitd $(PYTHON) -m unittest discover -s tests/integ -t . -v

valgrind:
	$(MAKE) test-unit TEST_PREFIX="valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite" CK_FORK=no
	$(MAKE) test-integ VALGRIND=1

bench: all
	$(PYTHON) tests/bench/run.py
	ADMITD_BIN=$(CURDIR)/daemon/admitd $(PYTHON) tests/bench/fair.py --png tests/bench/results/fairness.png

format:
	clang-format -i $(shell git ls-files '*.c' '*.h')

format-check:
	clang-format --dry-run --Werror $(shell git ls-files '*.c' '*.h')

# A soak under Redis faults (not in `make test`): survival, exactly one
# well-formed reply per request, clean exits. CHAOS_SECONDS=60 by default.
chaos: all
	ADMITD_BIN=$(CURDIR)/daemon/admitd $(PYTHON) -m tests.integ.chaos $(or $(CHAOS_SECONDS),60)

# README.md is the front door, written by hand: at most 250 lines, linking
# every page of docs/, and no relative link of it or of docs/ leads nowhere.
readme-check:
	$(PYTHON) -m unittest tests.integ.test_doc_links

# The daemon's layers run one way (daemon/LAYERS): no file includes a header
# of, or (read from the built objects) names a function of, a layer above its
# own, and no files name each other in a circle. Then the check's own tests
# (it must fail on a wrong include, an upward call, a circle). And no
# hand-written source file is over 800 lines (tests/tools/sizes.py), with its
# own test.
layers: all
	$(PYTHON) tests/tools/layers.py --objects
	$(PYTHON) tests/tools/sizes.py
	$(PYTHON) -m unittest tests.integ.test_layers tests.integ.test_sizes

lint:
	cppcheck --quiet --error-exitcode=1 --enable=warning,portability,performance \
	  --suppress=missingIncludeSystem --inline-suppr $(DAEMON_INC) -Iproto \
	  daemon proto $(wildcard client/*.c)

# make install [PREFIX=/usr/local] [DESTDIR=...]: the daemon, the example
# confs and the Kubernetes examples (sidecar, PodMonitor), the systemd unit (its paths
# rewritten to PREFIX's), the Python package (for $(PYTHON): its
# PREFIX/lib/pythonX.Y/{dist,site}-packages), and, from client/client.mk,
# admit, libadmit, its headers and admit.pc.
SBINDIR        ?= $(PREFIX)/sbin
DATADIR        ?= $(PREFIX)/share/admitd
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
PYTHON_SITEDIR ?= $(shell $(PYTHON) -c 'import sys; v = "python%d.%d" % sys.version_info[:2]; \
	d = [p for p in sys.path if p.startswith("$(PREFIX)/lib/" + v + "/") and \
	p.endswith("dist-packages")]; print(d[0] if d else "$(PREFIX)/lib/" + v + "/site-packages")')

install: all install-python
	install -d $(DESTDIR)$(SBINDIR) $(DESTDIR)$(DATADIR) $(DESTDIR)$(SYSTEMDUNITDIR)
	install -m 755 daemon/admitd $(DESTDIR)$(SBINDIR)/admitd
	install -m 644 conf/admitd.conf $(DESTDIR)$(DATADIR)/admitd.conf.example
	install -m 644 conf/minimal.conf $(DESTDIR)$(DATADIR)/minimal.conf.example
	install -m 644 conf/kubernetes-sidecar.yaml $(DESTDIR)$(DATADIR)/kubernetes-sidecar.yaml
	install -m 644 conf/kubernetes-podmonitor.yaml $(DESTDIR)$(DATADIR)/kubernetes-podmonitor.yaml
	sed -e 's|/usr/local/sbin/|$(SBINDIR)/|g' -e 's|/usr/local/share/admitd/|$(DATADIR)/|g' \
	  systemd/admitd.service > $(DESTDIR)$(SYSTEMDUNITDIR)/admitd.service.tmp
	chmod 644 $(DESTDIR)$(SYSTEMDUNITDIR)/admitd.service.tmp
	mv $(DESTDIR)$(SYSTEMDUNITDIR)/admitd.service.tmp $(DESTDIR)$(SYSTEMDUNITDIR)/admitd.service

install-python:
	install -d $(DESTDIR)$(PYTHON_SITEDIR)/admit
	install -m 644 client/python/admit/*.py client/python/admit/py.typed \
	  $(DESTDIR)$(PYTHON_SITEDIR)/admit/

clean:
	rm -f daemon/admitd daemon/libadmitd.a daemon/store/scripts_gen.c \
	  $(addsuffix /*.o,$(DAEMON_DIRS)) $(addsuffix /*.d,$(DAEMON_DIRS)) $(CHECK_BINS) $(CHECK_SRCS:.c=.d)
	rm -rf tests/integ/__pycache__

-include $(DEPS)
