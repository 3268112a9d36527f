# mk/node.mk - the Node.js client's tests (client/node), part of `make test`.
# Skipped, with the reason printed, where node is not installed.
.PHONY: test-node
test: test-node

test-node: all
	@if command -v node >/dev/null 2>&1; then \
	  cd client/node && ADMITD_BIN=$(CURDIR)/daemon/admitd node --test test/; \
	else \
	  echo "test-node: skipped: node is not installed (apt-get install nodejs)"; \
	fi
