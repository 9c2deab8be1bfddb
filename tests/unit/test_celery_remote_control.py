"""Celery's remote control is off (issue 50): with it on, anyone holding the Redis password
could broadcast `shutdown` to every worker; the operator never sends a control command."""

from __future__ import annotations

from types import SimpleNamespace

from celery.worker.consumer.control import Control

from workers.celery_app import app


def test_the_worker_consumer_leaves_out_its_remote_control_step():
    # The consumer's Control bootstep (the pidbox that answers broadcasts) is built only when
    # its include_if holds; Redis supports fanout, so only the setting can keep it out.
    consumer = SimpleNamespace(app=app, conninfo=SimpleNamespace(supports_exchange_type=bool))
    assert app.conf.worker_enable_remote_control is False
    assert not Control.include_if(Control.__new__(Control), consumer)
