# mk/rpool.mk - the Redis pool's test driver (tests/tools/rpool_drive).
#
# The driver links only the objects it needs (not libadmitd.a), so it builds
# while the rest of the daemon is in flux. tests/integ/test_rpool.py runs it
# ($RPOOL_DRIVE overrides the path).
#
# Sanitized, without touching the shared objects:
#   make tests/tools/rpool_drive.asan
#   RPOOL_DRIVE=$PWD/tests/tools/rpool_drive.asan python3 -m unittest tests.integ.test_rpool -v
# (or `make clean && make SANITIZE=1 test`, which rebuilds everything sanitized).
# Under valgrind: VALGRIND=1 python3 -m unittest tests.integ.test_rpool -v

RPOOL_DRIVE_OBJS := $(patsubst %.c,%.o,$(wildcard daemon/redis_client/*.c)) daemon/base/log.o \
		    daemon/base/clock.o daemon/base/decimal.o
RPOOL_DRIVE_SRCS := tests/tools/rpool_drive.c $(RPOOL_DRIVE_OBJS:.o=.c)

tests/tools/rpool_drive: tests/tools/rpool_drive.c $(RPOOL_DRIVE_OBJS)
	$(CC) $(ALL_CFLAGS) $(ALL_LDFLAGS) -o $@ $< $(RPOOL_DRIVE_OBJS) $(BASE_LDLIBS)

tests/tools/rpool_drive.asan: $(RPOOL_DRIVE_SRCS) $(wildcard daemon/redis_client/*.h) \
		daemon/base/log.h daemon/base/clock.h daemon/base/decimal.h
	$(CC) $(filter-out -MMD -MP,$(ALL_CFLAGS)) -fsanitize=address,undefined \
	  -fno-sanitize-recover=all -fno-omit-frame-pointer -o $@ $(RPOOL_DRIVE_SRCS) \
	  $(BASE_LDLIBS)

test-integ: tests/tools/rpool_drive

.PHONY: clean-rpool-drive
clean: clean-rpool-drive
clean-rpool-drive:
	rm -f tests/tools/rpool_drive tests/tools/rpool_drive.asan tests/tools/rpool_drive.d

-include tests/tools/rpool_drive.d
