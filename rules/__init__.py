"""advisor's rules, one module per family; shipped as ``advisor.rules``.

Add a rule by writing a :class:`advisor.rule.Rule` subclass in the module of its
family (or a new module). The registry finds it; its ``valid``/``invalid`` examples
become tests automatically.
"""
