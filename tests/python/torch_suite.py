"""PyTorch's own distributed test base (torch/testing/_internal/distributed/distributed_test.py,
DistributedTest._DistTestBase) run against a backend, as upstream's test_distributed_spawn.py runs it, with forked
ranks (a spawned rank imports torch afresh: seconds each).

    /usr/bin/python3 tests/python/torch_suite.py --backend tbcoll --world-size 2 [-k PATTERN] [--list]

The skip decisions are gloo's: the test base is imported with BACKEND=gloo, so every decorator that skips a test
decides as it does for gloo; the runs themselves use --backend: the module's BACKEND is set to it afterwards (a name
that compares equal to "gloo" too, so the bodies' own branches on the backend go gloo's way), and it joins gloo in
the base's tables of backend features. At 2 ranks every test runs but the subgroup ones (they take
ranks 1 and 2); at 3 ranks only those (--world-size 3 selects them unless -k says otherwise). Each test's outcome
is printed as it ends ("PASS", "FAIL", "SKIP (reason)") with its time; the last line says
"N passed, N failed, N skipped". Tests that fail here on gloo as well are left out, each with the reason (KNOWN), and
so are those another backend cannot pass (CANNOT, each with the reason), listed at the start.
Exit status 0 when nothing failed.
"""
import argparse
import logging
import os
import re
import sys
import tempfile
import time
import unittest

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--backend", default=os.environ.get("TBCOLL_SUITE_BACKEND", "tbcoll"))
parser.add_argument("--world-size", type=int, default=int(os.environ.get("TBCOLL_SUITE_WORLD_SIZE", "2")))
parser.add_argument("-k", dest="pattern", default=None, help="run the tests whose name matches this regex")
parser.add_argument("--list", action="store_true", help="list the tests that would run, run none")
parser.add_argument("--timeout", type=float, default=120, help="seconds a test may take (the base's own default: 300)")
args, _ = parser.parse_known_args()

os.environ["BACKEND"] = "gloo"  # the decorators' skip decisions are made at import: gloo's
os.environ["WORLD_SIZE"] = str(args.world_size)
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("TEMP_DIR", tempfile.mkdtemp(prefix="tbcoll-torch-suite-"))
# As upstream's CI runs the base: a file:// rendezvous (the tests that re-initialise the group need one).
os.environ.setdefault("INIT_METHOD", "file://" + os.path.join(os.environ["TEMP_DIR"], "init_file"))

# torch's test utilities import expecttest (PyPI; Debian 12 has no package) for TestCase.assertExpectedInline,
# which the distributed tests never call: plain unittest stands in for it.
try:
    import expecttest  # noqa: F401
except ImportError:
    import types
    sys.modules["expecttest"] = types.SimpleNamespace(TestCase=unittest.TestCase, ACCEPT=False)

import torch  # noqa: E402
import torch.multiprocessing  # noqa: E402
from torch.testing._internal import common_distributed  # noqa: E402
from torch.testing._internal.distributed import distributed_test as base  # noqa: E402

class AsGloo(str):
    """The backend's name, equal to "gloo" as well: the test bodies' own branches on BACKEND == "gloo" (which CPU
    path a test takes, which batch sizes) decide for it as for gloo."""

    def __eq__(self, other):
        return str.__eq__(self, other) or other == "gloo"

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = str.__hash__


if args.backend != "gloo":
    if args.backend == "tbcoll":
        import tbcoll.torch_backend  # noqa: F401  (registers "tbcoll")
    base.BACKEND = AsGloo(args.backend)
    for features in list(base.DistTestCases.backend_feature.values()) + list(base.DistTestCases.skip_collective.values()):
        if "gloo" in features:
            features.add(args.backend)
    for listed in (base.PROFILING_SUPPORTED_BACKENDS, base.SEND_RECV_PROFILING_SUPPORTED_BACKENDS):
        listed.append(args.backend)
    if args.backend == "tbcoll":
        # torch 1.13's dist.monitored_barrier refuses every backend but gloo by name; tbcoll's is the same call
        # without that check (the process group's monitoredBarrier), what a tbcoll user calls.
        torch.distributed.monitored_barrier = tbcoll.torch_backend.monitored_barrier
# Each rank turns on DDP's ReplicatedTensor mode first (TestDistBackend._run), which imports
# torch.distributed._shard: on Python 3.11 torch 1.13's module fails at import (a dataclass with a mutable default),
# and every DDP test with it, on any backend. DDP's own path (the mode off, torch's default) is what runs here.
from torch.nn.parallel import _replicated_tensor_ddp_utils  # noqa: E402

_replicated_tensor_ddp_utils._set_ddp_with_replicated_tensor = lambda value: None
logging.getLogger("torch.testing._internal.common_distributed").setLevel(logging.WARNING)
logging.getLogger("torch.distributed.distributed_c10d").setLevel(logging.WARNING)
common_distributed.TIMEOUT_DEFAULT = int(args.timeout)
base.DEFAULT_TIMEOUT = int(args.timeout)

# Tests that fail on this machine with gloo too (so with any backend), and why. Not run.
KNOWN = {
}

# Tests that pass on gloo but cannot on another backend, and why. Not run for it.
CANNOT = {
}

# The subgroup tests: they build a group of ranks 1 and 2 (_init_group_test) or split the world in subgroups.
SUBGROUP = re.compile(r"_group(_|$)(?!.*full)|new_subgroups|subgroup")


def is_subgroup_test(name):
    return bool(SUBGROUP.search(name)) and "full_group" not in name


class TestDistBackendWithFork(base.TestDistBackend, base.DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._start_processes(torch.multiprocessing.get_context("fork").Process)


def selected():
    names = sorted(n for n in dir(TestDistBackendWithFork) if n.startswith("test_"))
    if args.pattern:
        names = [n for n in names if re.search(args.pattern, n)]
    elif args.world_size >= 3:
        names = [n for n in names if is_subgroup_test(n)]
    else:
        names = [n for n in names if not is_subgroup_test(n)]
    left_out = KNOWN if args.backend == "gloo" else {**KNOWN, **CANNOT}
    return [n for n in names if n not in left_out]


class Report(unittest.TextTestResult):
    def startTest(self, test):
        self._started = time.monotonic()
        super().startTest(test)

    def _line(self, test, what):
        name = test.id().split(".")[-1]
        self.stream.write(f"{what:<5} {name} ({time.monotonic() - self._started:.1f} s)\n")
        self.stream.flush()

    def addSuccess(self, test):
        unittest.TestResult.addSuccess(self, test)
        self._line(test, "PASS")

    def addFailure(self, test, err):
        unittest.TestResult.addFailure(self, test, err)
        self._line(test, "FAIL")

    def addError(self, test, err):
        unittest.TestResult.addError(self, test, err)
        self._line(test, "FAIL")

    def addSkip(self, test, reason):
        unittest.TestResult.addSkip(self, test, reason)
        self._line(test, "SKIP")
        self.stream.write(f"      ({reason.strip()[:150]})\n")


def main():
    names = selected()
    if args.list:
        print("\n".join(names))
        return 0
    print(f"# torch {torch.__version__} distributed test base on {args.backend}, {args.world_size} ranks, "
          f"{len(names)} tests (gloo's skip decisions)", flush=True)
    for name, reason in sorted(KNOWN.items()):
        print(f"LEFT OUT {name}: fails on gloo here too: {reason}")
    if args.backend != "gloo":
        for name, reason in sorted(CANNOT.items()):
            if name in dir(TestDistBackendWithFork):
                print(f"LEFT OUT {name}: {reason}")
    suite = unittest.TestSuite(TestDistBackendWithFork(n) for n in names)
    runner = unittest.TextTestRunner(stream=sys.stdout, verbosity=0, resultclass=Report)
    result = runner.run(suite)
    failed = len(result.failures) + len(result.errors)
    for test, trace in result.failures + result.errors:
        print(f"==== {test.id().split('.')[-1]}\n{trace}")
    passed = result.testsRun - failed - len(result.skipped)
    print(f"{passed} passed, {failed} failed, {len(result.skipped)} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
