#!/bin/sh
# build-readme.sh - README.md is assembled from docs/ fragments, so each part
# has one source (conf-keys.md is also checked against `admitd --help-conf`).
set -eu
cd "$(dirname "$0")"
{
	cat readme-head.md
	echo
	sed 's/^## Configuration/## Configuration (conf keys)/' conf-keys.md
	echo
	cat redis-deployments.md
	echo
	cat metrics.md
	echo
	echo "## Clients"
	echo
	cat clients-c.md
	echo
	cat clients-python.md
	echo
	cat clients-node.md
	cat readme-tail.md
} > ../README.md
