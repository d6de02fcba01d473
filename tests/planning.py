"""Plan a family from a plain table, as a suite would give it (checked against the
family's Spec), for tests that plan one family directly."""
from cxlbench.benchmarks import spec


def plan(module, table, env):
    """module.plan with `table` parsed into the family's Spec; the runner's own
    defaults (repetitions, warmup ...) are the Spec's."""
    return module.plan(spec.of(module, table), env)
