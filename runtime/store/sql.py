"""`sql(statement)`: a SQLAlchemy TextClause built once per distinct statement.

Building a TextClause parses its bind parameters with a regex; on hot paths that parse cost
more than the SQLite work, so each statement string is parsed once per process.
"""

from __future__ import annotations

from functools import lru_cache

from sqlalchemy import TextClause, text


@lru_cache(maxsize=512)
def sql(statement: str) -> TextClause:
    return text(statement)
