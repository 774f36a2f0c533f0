"""What applications subclass and declare: the base classes (``bases``), the contexts they see as
``self.context`` (``contexts``) and ``Application`` with its decorators (``application``)."""
