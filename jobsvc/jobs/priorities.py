"""Priority among one user's due jobs: higher runs first.

Fair share still decides which user is served next; priority only orders that user's own
due jobs. No Django here: the scheduler's SQL (scheduler_worker/queries.py) is built from
these at import time.
"""

PRIORITY_MIN = 1
PRIORITY_MAX = 9
PRIORITY_DEFAULT = 5
