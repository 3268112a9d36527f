# mk/fuzz.mk - `make fuzz`: the protocol codec under libFuzzer;
# `make fuzz-lease`: the lease handle decoder (tests/fuzz/fuzz_lease_id.c,
# built from daemon/wire/lease_id.c alone, seeded with handles of every shape).
#
# tests/fuzz/fuzz_proto is built with clang from daemon/wire/proto*.c (the
# codec needs nothing else but daemon/strategy/adaptive.c, base/spares.c and
# base/decimal.c, and jansson), with
# -fsanitize=fuzzer,address,undefined, and run for FUZZ_TIME seconds over a corpus seeded from every "send" of
# proto/vectors/*.jsonl. The corpus grows in build/fuzz/corpus (kept between
# runs); a crashing input is written to build/fuzz/ and fails the target.
#
#   make fuzz                  30 s
#   make fuzz FUZZ_TIME=600    longer
#   make fuzz FUZZ_ARGS='-jobs=4 -workers=4'    any further libFuzzer flags

FUZZ_CC     ?= clang
FUZZ_TIME   ?= 30
FUZZ_ARGS   ?=
FUZZ_DIR    := build/fuzz
FUZZ_CORPUS := $(FUZZ_DIR)/corpus
FUZZ_BIN    := tests/fuzz/fuzz_proto
FUZZ_SRCS   := tests/fuzz/fuzz_proto.c daemon/wire/proto.c daemon/wire/proto_reply.c \
               daemon/wire/proto_upstream.c daemon/wire/proto_fast.c \
               daemon/strategy/adaptive.c daemon/base/spares.c daemon/base/decimal.c
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -g -O1 $(WARN) $(DAEMON_INC) -Iproto \
               -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
               -fno-omit-frame-pointer $(shell pkg-config --cflags jansson)
FUZZ_LIBS   := $(shell pkg-config --libs jansson)
FUZZ_VECTORS := $(sort $(wildcard proto/vectors/*.jsonl))

# One file per "send" (a string is the raw line; an object, its compact JSON).
FUZZ_SEED_PY := import json,os,sys; d=sys.argv[1]; \
  sends=[st["send"] for f in sys.argv[2:] for l in open(f) if l.strip() \
         for v in [json.loads(l)] for st in (v.get("steps") or [v]) if "send" in st]; \
  [open(os.path.join(d,"vec%03d"%i),"w").write(s if isinstance(s,str) else \
   json.dumps(s,separators=(",",":"))) for i,s in enumerate(sends)]

.PHONY: fuzz fuzz-build fuzz-lease clean-fuzz

FUZZ_LEASE_BIN    := tests/fuzz/fuzz_lease_id
FUZZ_LEASE_CORPUS := $(FUZZ_DIR)/lease-corpus

$(FUZZ_LEASE_BIN): tests/fuzz/fuzz_lease_id.c daemon/wire/lease_id.c daemon/wire/lease_id.h
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ \
	  tests/fuzz/fuzz_lease_id.c daemon/wire/lease_id.c

# Seeds: real handles (one target, several, a class, reservations).
FUZZ_LEASE_SEED_PY := import base64,os,sys; d=sys.argv[1]; \
  h=lambda t,r: "0123456789abcdef0123456789abcdef."+base64.urlsafe_b64encode(bytes([1])+ \
    b"".join(s.encode()+b"\0"+c.encode()+b"\0"+k.encode()+b"\0" for s,c,k in t)+ \
    ((b"\0"+b"".join(n.encode()+b"\0"+str(v).encode()+b"\0" for n,v in r)) if r else b"") \
    ).decode().rstrip("="); \
  seeds=[h([("llm","","k")],[]),h([("a","c","x"),("b","","y")],[("output",1000)]), \
    h([("s","","")],[("in",0),("out",99)])]; \
  [open(os.path.join(d,"seed%d"%i),"w").write(x) for i,x in enumerate(seeds)]

fuzz-lease: $(FUZZ_LEASE_BIN)
	mkdir -p $(FUZZ_LEASE_CORPUS)
	$(PYTHON) -c '$(FUZZ_LEASE_SEED_PY)' $(FUZZ_LEASE_CORPUS)
	./$(FUZZ_LEASE_BIN) -max_len=2048 -max_total_time=$(FUZZ_TIME) \
	  -artifact_prefix=$(FUZZ_DIR)/ -print_final_stats=1 $(FUZZ_ARGS) $(FUZZ_LEASE_CORPUS)

fuzz-build: $(FUZZ_BIN)

$(FUZZ_BIN): $(FUZZ_SRCS) daemon/wire/proto.h proto/admit_proto.h
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $(FUZZ_SRCS) $(FUZZ_LIBS)

$(FUZZ_DIR)/seed.stamp: $(FUZZ_VECTORS) mk/fuzz.mk
	mkdir -p $(FUZZ_CORPUS)
	$(PYTHON) -c '$(FUZZ_SEED_PY)' $(FUZZ_CORPUS) $(FUZZ_VECTORS)
	touch $@

fuzz: $(FUZZ_BIN) $(FUZZ_DIR)/seed.stamp
	./$(FUZZ_BIN) -dict=tests/fuzz/fuzz_proto.dict -max_len=4096 \
	  -max_total_time=$(FUZZ_TIME) -artifact_prefix=$(FUZZ_DIR)/ -print_final_stats=1 \
	  $(FUZZ_ARGS) $(FUZZ_CORPUS)

clean: clean-fuzz
clean-fuzz:
	rm -f $(FUZZ_BIN) $(FUZZ_LEASE_BIN)
	rm -rf $(FUZZ_DIR)
