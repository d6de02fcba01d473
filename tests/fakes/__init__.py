"""Test doubles, imported as `fakes` (tests/ is on sys.path):

family      a benchmark family (a plugin, by dotted name) for testing the runner: each
            case does what its `mode` says
gpu         FakeDevice, a numpy stand-in for a CUDA device, for the GPU families
synthetic   runs with known distributions written through the real store, for the
            analysis, report and gate tests

They live with the tests, not in the package: no command uses them.
"""
