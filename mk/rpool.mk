# mk/rpool.mk - the Redis pool's test driver (tests/tools/rpool_drive).
#
# The driver links only the objects it needs (not libadmitd.a), so it builds
# while the rest of the daemon is in flux. tests/integ/test_rpool.py runs it.
# Sanitized: `make clean && make SANITIZE=1 tests/tools/rpool_drive`, then
# run the integration tests as usual (the objects are shared with the daemon,
# so build everything with the same SANITIZE setting).

RPOOL_DRIVE_OBJS := daemon/rpool.o daemon/redis_url.o daemon/log.o daemon/clock.o

tests/tools/rpool_drive: tests/tools/rpool_drive.c $(RPOOL_DRIVE_OBJS)
	$(CC) $(ALL_CFLAGS) $(ALL_LDFLAGS) -o $@ $< $(RPOOL_DRIVE_OBJS) $(BASE_LDLIBS)

test-integ: tests/tools/rpool_drive

.PHONY: clean-rpool-drive
clean: clean-rpool-drive
clean-rpool-drive:
	rm -f tests/tools/rpool_drive tests/tools/rpool_drive.d

-include tests/tools/rpool_drive.d
