"""Beyond one machine: an existing engine (Slurm, Kubernetes) runs the ordinary
single-machine `cxlbench run` on many nodes into one store, and the fleet's report
reads that store back, machines grouped by hardware configuration.

configuration.py names a machine's configuration; slurm.py dispatches and watches
jobs; kubernetes.py writes manifests; outcome.py says what each node did;
matrix.py (figures across machines) and page.py (text and HTML) are the report.
"""
