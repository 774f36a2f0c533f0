"""Generic Trio engines that know nothing of Spots: the execution gate (``gate``), the bounded
mailbox and job permits (``mailbox``), the completion dispatcher (``completion``), logical timers
(``timers``), the worker scheduler (``workers``), the application clock (``clock``) and the
garbage collector kept off the heap (``heap``). Imports nothing else of ``_runtime``."""
