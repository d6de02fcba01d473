"""cxlbench: characterise the memory tiers AI training spills into.

The public API is small: `load` reads stored runs into a tidy DataFrame;
`histograms` their latency distributions, one row per histogram bucket;
`history` reads a machine's runs of one suite as one row per run × figure.
"""
from cxlbench.version import __version__


def load(paths, **kwargs):
    """Samples of one or more runs (run directories, or folders holding them) as one
    tidy pandas DataFrame, one row per sample; the drift sentinels only with
    sentinels=True. See cxlbench.results.store.load."""
    from cxlbench.results.store import load as _load
    return _load(paths, **kwargs)


def repetitions(samples):
    """One row per process repetition of each point (the median of its inner samples),
    from load()'s samples: what every figure cxlbench prints is a median of. See
    cxlbench.analysis.reduction.repetitions."""
    from cxlbench.analysis.reduction import repetitions as _repetitions
    return _repetitions(samples)


def histograms(paths):
    """The latency distributions of one or more runs (histograms.parquet beside each
    run's samples) as one pandas DataFrame, one row per histogram bucket. See
    cxlbench.results.store.load_histograms."""
    from cxlbench.results.store import load_histograms
    return load_histograms(paths)


def history(paths="results", machine=None, suite=None):
    """A machine's runs of one suite in time order, one row per run × figure (its
    median, interval, repetitions, precision, headline label, and the run's kernel,
    firmware, THP and cxlbench version), as a pandas DataFrame. The History record
    behind it (change points, accepted changes): cxlbench.analysis.history.history."""
    from cxlbench.analysis.history import history as _history
    h = _history(paths, machine, suite)
    return h.rows.merge(h.runs, on=["run_id", "position"]).sort_values(["position", "point"],
                                                                        ignore_index=True)


__all__ = ["load", "repetitions", "histograms", "history", "__version__"]
