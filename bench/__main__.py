"""``python -m bench``: the IMDB / SST-5 benchmark (``bench/run.py``); ``python -m bench --suite``: the suite of
labelled sets (``bench/suite.py``), with the suite's own options after ``--suite``."""

import sys

if "--suite" in sys.argv[1:]:
    from bench.suite import main as suite_main

    suite_main([a for a in sys.argv[1:] if a != "--suite"])
else:
    from bench.run import main

    main()
