"""What the operator observed: reconcile runs, condition changes, events, status reports."""
