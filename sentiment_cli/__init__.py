"""sentiment: a small from-scratch Transformer sentiment classifier for IMDB, as a library and a CLI.

The package root imports nothing heavy; import the modules you need
(``sentiment_cli.inference.predictor.Predictor``, ``sentiment_cli.training.run.train``...).
"""

__version__ = "0.1.0"
