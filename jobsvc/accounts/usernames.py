"""What makes two usernames the same name: compatibility forms and case do not count.

``\\uff53am`` (a fullwidth s), ``Sam`` and ``sam`` look alike in the admin, in logs and to
support, so they are one name: a user signs up as any of them only if none is taken, and
logs in with any of them. The stored username is the NFKC form of what the user typed
(Django's ``normalize_username``); ``username_key`` is what uniqueness and log-in
compare. It is computed here, in Python, because PostgreSQL's ``lower()`` folds only
ASCII under the C locale the databases may use.
"""

from __future__ import annotations

import unicodedata

MAX_KEY_LENGTH = 600  # case folding can lengthen a name (ß -> ss); 150 characters x 4


def username_key(username: str) -> str:
    """The canonical form of ``username``: NFKC, case-folded, NFKC again (as Unicode's
    NFKC_Casefold, which folding can denormalise)."""
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", username).casefold())
