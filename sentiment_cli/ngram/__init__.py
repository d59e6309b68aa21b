"""The n-gram score: a linear model over a text's hashed token 1-3-grams, fitted on the training split, in the logits.

A layer between ``data`` (token ids) and ``model`` (the classifier holds an :class:`~.score.NgramScore`); the
training run, distillation and ``sentiment audit`` use it too. One job per module:

- ``features.py``: hashing of token 1-3-grams (torch, what the model and its export run) and their binarised
  sparse matrices (scipy, what the fits read);
- ``forms.py``: the two forms, NB-LR (Wang & Manning 2012) and logistic regression, fitted by scikit-learn;
- ``selection.py``: the cross-validated choice of form and C;
- ``estimator.py``: :class:`~.estimator.NgramEstimator`, the fit as a scikit-learn-style estimator;
- ``memory.py``: the memory a fit takes, bounded before it allocates (:class:`~.memory.FitLimit`);
- ``score.py``: :class:`~.score.NgramScore`, the ``nn.Module`` and its names in a checkpoint;
- ``crossfit.py``: out-of-fold scores, shared by training's residual and the audit;
- ``fit.py``: a training run's fit (:func:`~.fit.fit_ngram_score`);
- ``report.py``: its record in ``metrics.json``.
"""
