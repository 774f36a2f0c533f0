"""What an application declares, as the runtime reads it: handler decorators (``handlers``), the
frozen registry and its one-time validation (``registry``), ``HostConfig`` (``config``) and the
values handlers see and return (``values``). Above the engines only."""
