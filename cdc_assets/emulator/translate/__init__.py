"""One statement translated into SQLite text: parsed by sqlglot, planned by its kind.

``statements`` (parse, dispatch to the planner registered for the statement's kind), ``plan``
(what a statement translates to and what running it returns), the translator's sections
``translator_core``, ``scope`` (names in FROM clauses), ``type_rules``, ``expressions``,
``system_functions``, ``queries`` (SELECT), assembled in ``translate``; ``dml`` (INSERT,
UPDATE, DELETE, TRUNCATE).
"""
