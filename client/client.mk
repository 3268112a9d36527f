# client/client.mk - build, test and install rules for libadmit and the
# `admit` CLI (included by the top-level Makefile; uses its ALL_CFLAGS).
#
#   client/libadmit.a, client/libadmit.so   the library: admit_*.c (admit.h public,
#                                           admit_int.h its files' own)
#   client/admit                            the CLI: cli_*.c and admit_top.c (cli.h),
#                                           linked with libadmit.a
#   client/admit.pc                         pkg-config file for PREFIX
#   make test-client                        tests/client + client/python tests

# The soname's number changes whenever a public struct of admit.h changes
# size or layout (callers allocate admit_req and admit_result): 2 since
# admit_req gained reserve and admit_result limit, redis and inspect; 3
# since admit_result and admit_scope_stat gained the wait histogram.
# Reply fields and calls added since are functions (admit_result_remaining,
# admit_result_reset_ms, admit_result_target, admit_result_limit(_of), admit_release_outcome,
# admit_cancel, admit_override with its own struct admit_rule_amount), so
# programs built against libadmit.so.3 keep working.
CLIENT_SONAME   := libadmit.so.3
CLIENT_LIB_OBJS := client/admit_conn.o client/admit_io.o client/admit_call.o \
                   client/admit_req.o client/admit_reply.o client/admit_result.o \
                   client/admit_json.o
CLIENT_LDLIBS   := $(shell pkg-config --libs jansson) -lm
CLIENT_TESTS    := tests/client/test_libadmit
LIBDIR          ?= $(PREFIX)/lib
INCLUDEDIR      ?= $(PREFIX)/include
BINDIR          ?= $(PREFIX)/bin

CLIENT_CLI_OBJS := client/cli_main.o client/cli_report.o client/cli_value.o \
                   client/cli_acquire.o client/cli_run.o client/cli_keys.o client/cli_show.o \
                   client/admit_top.o

DEPS += $(CLIENT_LIB_OBJS:.o=.d) $(CLIENT_CLI_OBJS:.o=.d) $(LIBADMIT_TEST_OBJS:.o=.d)

.PHONY: install-client clean-client
all: client/admit client/libadmit.so client/libadmit.a client/admit.pc

client/libadmit.a: $(CLIENT_LIB_OBJS)
	rm -f $@
	ar rcs $@ $^

client/libadmit.so: $(CLIENT_LIB_OBJS)
	$(CC) $(ALL_LDFLAGS) -shared -Wl,-soname,$(CLIENT_SONAME) -o $@ $^ $(CLIENT_LDLIBS)

client/admit: $(CLIENT_CLI_OBJS) client/libadmit.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CLIENT_LDLIBS)

# PREFIX may differ between `make` and `make install`: install writes its own copy
CLIENT_PC_SED = sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' \
	-e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' -e 's|@VERSION@|$(VERSION)|g'

client/admit.pc: client/admit.pc.in
	$(CLIENT_PC_SED) $< > $@.tmp && mv $@.tmp $@

# test_libadmit: main and helpers in test_libadmit.c, one file per group of
# checks (libadmit_*.c, sharing libadmit_test.h).
LIBADMIT_TEST_OBJS := tests/client/test_libadmit.o tests/client/libadmit_calls.o \
                      tests/client/libadmit_threads.o tests/client/libadmit_modes.o \
                      tests/client/libadmit_cancel.o

tests/client/%.o: tests/client/%.c
	$(CC) $(ALL_CFLAGS) -Iclient -c -o $@ $<

tests/client/test_libadmit: $(LIBADMIT_TEST_OBJS) client/libadmit.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CLIENT_LDLIBS) -lpthread

test-client: all $(CLIENT_TESTS)
	ADMITD_BIN=$(CURDIR)/daemon/admitd ADMIT_BIN=$(CURDIR)/client/admit \
	  ADMIT_TEST_LIBADMIT=$(CURDIR)/tests/client/test_libadmit \
	  $(PYTHON) -m unittest discover -s tests/client -v
	@if [ -d client/python/tests ]; then \
	  echo "ADMITD_BIN=$(CURDIR)/daemon/admitd $(PYTHON) -m unittest discover -s client/python/tests -t client/python"; \
	  ADMITD_BIN=$(CURDIR)/daemon/admitd \
	    $(PYTHON) -m unittest discover -s client/python/tests -t client/python -v; fi

install: install-client
install-client: client/admit client/libadmit.so client/libadmit.a client/admit.pc
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCLUDEDIR)
	install -m 755 client/admit $(DESTDIR)$(BINDIR)/admit
	install -m 644 client/libadmit.a $(DESTDIR)$(LIBDIR)/libadmit.a
	install -m 755 client/libadmit.so $(DESTDIR)$(LIBDIR)/$(CLIENT_SONAME)
	ln -sf $(CLIENT_SONAME) $(DESTDIR)$(LIBDIR)/libadmit.so
	install -m 644 client/admit.h proto/admit_proto.h $(DESTDIR)$(INCLUDEDIR)/
	$(CLIENT_PC_SED) client/admit.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/admit.pc

clean: clean-client
clean-client:
	rm -f client/admit client/libadmit.a client/libadmit.so client/admit.pc \
	  client/*.o client/*.d $(CLIENT_TESTS) tests/client/*.o tests/client/*.d
	rm -rf tests/client/__pycache__
