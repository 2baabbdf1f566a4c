"""Run as a script (`python tritonclient_probe.py '<json>'`), never imported by a test process: tritonclient's and
kserve's generated OIP messages cannot share one protobuf descriptor pool. What tritonclient's gRPC and HTTP clients
get from a predictor: its Triton model config, the repository index, the config of a model it does not serve, and
for each named case (a list of inputs: name, datatype, shape, values) either the outputs' names or the refusal's
status and message. Prints one JSON object, keyed by protocol."""
from __future__ import annotations

import json
import sys

import numpy as np
import tritonclient.grpc as tg
import tritonclient.http as th
from tritonclient.utils import InferenceServerException, triton_to_np_dtype


def _error(exc: InferenceServerException) -> list:
    return [str(exc.status()), exc.message()]


def probe(a: dict) -> dict:
    headers = {"authorization": "Bearer " + a["token"]}
    out = {}
    for proto, mod, port in (("grpc", tg, a["grpc"]), ("http", th, a["http"])):
        client = mod.InferenceServerClient(f"127.0.0.1:{port}")
        try:
            got: dict = {}
            if proto == "grpc":
                got["config"] = client.get_model_config(a["model"], headers=headers, as_json=True)["config"]
                got["index"] = client.get_model_repository_index(headers=headers, as_json=True).get("models", [])
            else:
                got["config"] = client.get_model_config(a["model"], headers=headers)
                got["index"] = client.get_model_repository_index(headers=headers)
            try:
                client.get_model_config("no-such-model", headers=headers)
                got["missing"] = None
            except InferenceServerException as exc:
                got["missing"] = _error(exc)
            got["cases"] = {}
            for case, tensors in a["cases"].items():
                inputs = []
                for name, datatype, shape, values in tensors:
                    inp = mod.InferInput(name, shape, datatype)
                    if datatype == "BYTES":
                        data = np.array([v.encode() for v in values], dtype=object)
                    else:
                        data = np.array(values, dtype=triton_to_np_dtype(datatype))
                    inp.set_data_from_numpy(data.reshape(shape))
                    inputs.append(inp)
                try:
                    result = client.infer(a["model"], inputs, headers=headers)
                    response = result.get_response(as_json=True) if proto == "grpc" else result.get_response()
                    got["cases"][case] = {"outputs": sorted(o["name"] for o in response["outputs"])}
                except InferenceServerException as exc:
                    got["cases"][case] = {"error": _error(exc)}
            out[proto] = got
        finally:
            client.close()
    return out


if __name__ == "__main__":
    print(json.dumps(probe(json.loads(sys.argv[1]))))
