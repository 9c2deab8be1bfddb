"""The pure reconcile engine: decisions over plain data; no Django, kubernetes client or HTTP."""
