# The QEMU test bed: a real multi-node NUMA guest with an emulated CXL type 3 device
# onlined by the kernel's own CXL stack, running cxlbench's guest tests.
# Included by the top Makefile. See docs/testing.md.
#
#   make testbed                 build, or reuse from the cache, QEMU + guest image
#   make test-testbed            boot each configuration, run the guest suite in it
#   make test-testbed TESTBED_CONFIG=cxl TESTBED_ARGS=-v    one configuration, console shown
#
# Needs root (dpkg -x, chroot) and the Debian mirror of this machine's apt sources.
# Nothing is installed on the host; downloads and images live in TESTBED_CACHE.

TESTBED_CACHE  ?= /var/cache/cxlbench-testbed
TESTBED_CONFIG ?= all
TESTBED_ARGS   ?=
TESTBED_PYTHON ?= python3
export TESTBED_CACHE

.PHONY: testbed test-testbed testbed-shell testbed-clean

testbed:
	TESTBED_HOST_PYTHON=$(TESTBED_PYTHON) bash testbed/build.sh all

test-testbed: testbed
	$(TESTBED_PYTHON) testbed/run.py --config $(TESTBED_CONFIG) $(TESTBED_ARGS)

# A shell in the guest after its setup (console on this terminal; `exit` powers off).
testbed-shell: testbed
	$(TESTBED_PYTHON) testbed/run.py --config $(if $(filter all,$(TESTBED_CONFIG)),cxl,$(TESTBED_CONFIG)) --shell

testbed-clean:
	rm -rf $(TESTBED_CACHE)
