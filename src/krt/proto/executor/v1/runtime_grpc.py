import purerpc
import krt.proto.executor.v1.runtime_pb2 as executor_dot_v1_dot_runtime__pb2


class RuntimeServicer(purerpc.Servicer):
    async def Execute(self, input_message):
        raise NotImplementedError()

    async def Status(self, input_message):
        raise NotImplementedError()

    async def List(self, input_message):
        raise NotImplementedError()

    async def Cancel(self, input_message):
        raise NotImplementedError()

    async def Forget(self, input_message):
        raise NotImplementedError()

    async def Health(self, input_message):
        raise NotImplementedError()

    @property
    def service(self) -> purerpc.Service:
        service_obj = purerpc.Service(
            "executor.v1.Runtime"
        )
        service_obj.add_method(
            "Execute",
            self.Execute,
            purerpc.RPCSignature(
                purerpc.Cardinality.UNARY_UNARY,
                executor_dot_v1_dot_runtime__pb2.ExecuteRequest,
                executor_dot_v1_dot_runtime__pb2.ExecuteResponse,
            )
        )
        service_obj.add_method(
            "Status",
            self.Status,
            purerpc.RPCSignature(
                purerpc.Cardinality.UNARY_UNARY,
                executor_dot_v1_dot_runtime__pb2.StatusRequest,
                executor_dot_v1_dot_runtime__pb2.StatusResponse,
            )
        )
        service_obj.add_method(
            "List",
            self.List,
            purerpc.RPCSignature(
                purerpc.Cardinality.UNARY_UNARY,
                executor_dot_v1_dot_runtime__pb2.ListRequest,
                executor_dot_v1_dot_runtime__pb2.ListResponse,
            )
        )
        service_obj.add_method(
            "Cancel",
            self.Cancel,
            purerpc.RPCSignature(
                purerpc.Cardinality.UNARY_UNARY,
                executor_dot_v1_dot_runtime__pb2.CancelRequest,
                executor_dot_v1_dot_runtime__pb2.CancelResponse,
            )
        )
        service_obj.add_method(
            "Forget",
            self.Forget,
            purerpc.RPCSignature(
                purerpc.Cardinality.UNARY_UNARY,
                executor_dot_v1_dot_runtime__pb2.ForgetRequest,
                executor_dot_v1_dot_runtime__pb2.ForgetResponse,
            )
        )
        service_obj.add_method(
            "Health",
            self.Health,
            purerpc.RPCSignature(
                purerpc.Cardinality.UNARY_UNARY,
                executor_dot_v1_dot_runtime__pb2.HealthRequest,
                executor_dot_v1_dot_runtime__pb2.HealthResponse,
            )
        )
        return service_obj


class RuntimeStub:
    def __init__(self, channel):
        self._client = purerpc.Client(
            "executor.v1.Runtime",
            channel
        )
        self.Execute = self._client.get_method_stub(
            "Execute",
            purerpc.RPCSignature(
                purerpc.Cardinality.UNARY_UNARY,
                executor_dot_v1_dot_runtime__pb2.ExecuteRequest,
                executor_dot_v1_dot_runtime__pb2.ExecuteResponse,
            )
        )
        self.Status = self._client.get_method_stub(
            "Status",
            purerpc.RPCSignature(
                purerpc.Cardinality.UNARY_UNARY,
                executor_dot_v1_dot_runtime__pb2.StatusRequest,
                executor_dot_v1_dot_runtime__pb2.StatusResponse,
            )
        )
        self.List = self._client.get_method_stub(
            "List",
            purerpc.RPCSignature(
                purerpc.Cardinality.UNARY_UNARY,
                executor_dot_v1_dot_runtime__pb2.ListRequest,
                executor_dot_v1_dot_runtime__pb2.ListResponse,
            )
        )
        self.Cancel = self._client.get_method_stub(
            "Cancel",
            purerpc.RPCSignature(
                purerpc.Cardinality.UNARY_UNARY,
                executor_dot_v1_dot_runtime__pb2.CancelRequest,
                executor_dot_v1_dot_runtime__pb2.CancelResponse,
            )
        )
        self.Forget = self._client.get_method_stub(
            "Forget",
            purerpc.RPCSignature(
                purerpc.Cardinality.UNARY_UNARY,
                executor_dot_v1_dot_runtime__pb2.ForgetRequest,
                executor_dot_v1_dot_runtime__pb2.ForgetResponse,
            )
        )
        self.Health = self._client.get_method_stub(
            "Health",
            purerpc.RPCSignature(
                purerpc.Cardinality.UNARY_UNARY,
                executor_dot_v1_dot_runtime__pb2.HealthRequest,
                executor_dot_v1_dot_runtime__pb2.HealthResponse,
            )
        )


class FunctionRuntimeServicer(purerpc.Servicer):
    async def RegisterFunction(self, input_message):
        raise NotImplementedError()

    async def FunctionStatus(self, input_message):
        raise NotImplementedError()

    async def InvokeFunction(self, input_message):
        raise NotImplementedError()

    async def UnregisterFunction(self, input_message):
        raise NotImplementedError()

    @property
    def service(self) -> purerpc.Service:
        service_obj = purerpc.Service(
            "executor.v1.FunctionRuntime"
        )
        service_obj.add_method(
            "RegisterFunction",
            self.RegisterFunction,
            purerpc.RPCSignature(
                purerpc.Cardinality.UNARY_UNARY,
                executor_dot_v1_dot_runtime__pb2.RegisterFunctionRequest,
                executor_dot_v1_dot_runtime__pb2.RegisterFunctionResponse,
            )
        )
        service_obj.add_method(
            "FunctionStatus",
            self.FunctionStatus,
            purerpc.RPCSignature(
                purerpc.Cardinality.UNARY_UNARY,
                executor_dot_v1_dot_runtime__pb2.FunctionStatusRequest,
                executor_dot_v1_dot_runtime__pb2.FunctionStatusResponse,
            )
        )
        service_obj.add_method(
            "InvokeFunction",
            self.InvokeFunction,
            purerpc.RPCSignature(
                purerpc.Cardinality.UNARY_UNARY,
                executor_dot_v1_dot_runtime__pb2.InvokeFunctionRequest,
                executor_dot_v1_dot_runtime__pb2.InvokeFunctionResponse,
            )
        )
        service_obj.add_method(
            "UnregisterFunction",
            self.UnregisterFunction,
            purerpc.RPCSignature(
                purerpc.Cardinality.UNARY_UNARY,
                executor_dot_v1_dot_runtime__pb2.UnregisterFunctionRequest,
                executor_dot_v1_dot_runtime__pb2.UnregisterFunctionResponse,
            )
        )
        return service_obj


class FunctionRuntimeStub:
    def __init__(self, channel):
        self._client = purerpc.Client(
            "executor.v1.FunctionRuntime",
            channel
        )
        self.RegisterFunction = self._client.get_method_stub(
            "RegisterFunction",
            purerpc.RPCSignature(
                purerpc.Cardinality.UNARY_UNARY,
                executor_dot_v1_dot_runtime__pb2.RegisterFunctionRequest,
                executor_dot_v1_dot_runtime__pb2.RegisterFunctionResponse,
            )
        )
        self.FunctionStatus = self._client.get_method_stub(
            "FunctionStatus",
            purerpc.RPCSignature(
                purerpc.Cardinality.UNARY_UNARY,
                executor_dot_v1_dot_runtime__pb2.FunctionStatusRequest,
                executor_dot_v1_dot_runtime__pb2.FunctionStatusResponse,
            )
        )
        self.InvokeFunction = self._client.get_method_stub(
            "InvokeFunction",
            purerpc.RPCSignature(
                purerpc.Cardinality.UNARY_UNARY,
                executor_dot_v1_dot_runtime__pb2.InvokeFunctionRequest,
                executor_dot_v1_dot_runtime__pb2.InvokeFunctionResponse,
            )
        )
        self.UnregisterFunction = self._client.get_method_stub(
            "UnregisterFunction",
            purerpc.RPCSignature(
                purerpc.Cardinality.UNARY_UNARY,
                executor_dot_v1_dot_runtime__pb2.UnregisterFunctionRequest,
                executor_dot_v1_dot_runtime__pb2.UnregisterFunctionResponse,
            )
        )