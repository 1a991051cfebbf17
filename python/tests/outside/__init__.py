"""Helpers of test_handlers_outside.py: the consumer app it runs as a process and the
producer that is not idem."""
