"""The T-SQL front end: a batch split into statements, and what sqlglot does not parse.

``batch`` (statements without ``;`` between them, ``IF`` / ``ELSE`` and ``BEGIN ... END``
nested), ``batch_statement`` (one statement: ``?`` markers renamed, transaction control and
``SET`` options recognised from tokens), ``variable_statements`` and ``variables`` (``DECLARE``,
``SET @v``, ``SELECT @v =``, table variables: what a batch declares), ``source_text`` (the
user's own T-SQL quoted in error messages).
"""
