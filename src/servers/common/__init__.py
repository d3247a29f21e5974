"""What both built-in Runtime Servers share: task executions, the registration table and the gRPC servicers."""
