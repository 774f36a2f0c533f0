"""Generic Trio engines that know nothing of Spots: the execution gate (``gate``), the bounded
mailbox and job permits (``mailbox``), the completion dispatcher (``completion``), logical timers
(``timers``) and the worker scheduler (``workers``). Imports nothing else of ``_runtime``."""
