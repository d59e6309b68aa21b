"""Behavioural tests of a trained classifier (``sentiment check``), in the taxonomy of Ribeiro et al. 2020
("Beyond Accuracy: Behavioral Testing of NLP Models with CheckList", ACL): MFT, INV and DIR tests grouped by
capability.

``suite.py`` reads and checks a suite file (TOML), ``templates.py`` fills its templates from its lexicons,
``perturb.py`` holds the perturbations of INV and DIR tests, ``cases.py`` turns a test into cases, and
``check.py`` scores the cases with any scorer and computes failure rates. ``sentiment.toml`` is the built-in
suite for two-class sentiment. Nothing here imports torch: the benchmark runs the same suite on the peers.
"""
