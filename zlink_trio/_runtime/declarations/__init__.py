"""What an application declares, as the runtime reads it: handler decorators (``handlers``), the
frozen registry and its one-time validation (``registry``), ``HostConfig`` (``config``), the
values handlers see and return (``values``), and relocation policies, adapters and the payload
rules of one capture or restore (``relocation``). Above the engines only."""
