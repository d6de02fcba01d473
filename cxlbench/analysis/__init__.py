"""Statistics, comparison across runs and machines, the regression gate, calibration.

Public API (each a plain function with explicit parameters; the CLI and the tests
call them directly):

    compare(runs, threshold=None, thresholds_file=None) -> Comparison
    format_comparison(comparison) -> str
    gate(baseline, current, threshold=None, thresholds_file=None, allow_missing=False,
         confirm=None, ignore_identity=()) -> GateResult   (.exit_code 0/1/2, .markdown(),
                                                             .to_json(), .junit_xml())
    calibrate(run_a, run_b, threshold=None, thresholds_file=None) -> Calibration
    profile(meta) -> Profile(identity, context, info)

Runs are run directories (str/Path) or cxlbench.results.store.Run objects.
"""
from cxlbench.analysis.calibrate import Calibration, calibrate
from cxlbench.analysis.compare import Comparison, compare, format_comparison
from cxlbench.analysis.gate import GateResult, gate
from cxlbench.analysis.machine import Profile, profile
from cxlbench.analysis.stats import CONFIDENCE, compare_values, median_ci, ratio_ci
from cxlbench.analysis.reduction import points, repetitions
from cxlbench.analysis.thresholds import EXAMPLE_FILE, ThresholdError, Thresholds, load_thresholds

__all__ = ["Calibration", "calibrate", "Comparison", "compare", "format_comparison", "GateResult",
           "gate", "Profile", "profile", "CONFIDENCE", "compare_values", "median_ci", "ratio_ci",
           "points", "repetitions", "EXAMPLE_FILE", "ThresholdError", "Thresholds", "load_thresholds"]
