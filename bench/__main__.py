"""``python -m bench``: the IMDB / SST-5 benchmark (``bench/run.py``); ``python -m bench --suite``: the suite of
labelled sets (``bench/suite.py``), with the suite's own options after ``--suite``; ``python -m bench --budget``: the
default's search at several time budgets against peers tuned within them (``bench/budget.py``); ``python -m bench
--busy``: the default beside CPU-bound competitors and without them (``bench/busy.py``)."""

import sys

if "--busy" in sys.argv[1:]:
    from bench.busy import main as busy_main

    busy_main([a for a in sys.argv[1:] if a != "--busy"])
elif "--budget" in sys.argv[1:]:
    from bench.budget import main as budget_main

    budget_main([a for a in sys.argv[1:] if a != "--budget"])
elif "--suite" in sys.argv[1:]:
    from bench.suite import main as suite_main

    suite_main([a for a in sys.argv[1:] if a != "--suite"])
else:
    from bench.run import main

    main()
