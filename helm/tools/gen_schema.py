"""Writes helm/praxon/values.schema.json and helm/praxon/catalog.yaml from this file and services/catalog.py: the
services, job queues and serving settings the chart deploys come from the code (a new service adds no chart lines;
run this and commit both files; tests/deploy fails when they differ from what it writes).

    .venv/bin/python helm/tools/gen_schema.py
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

CHART = Path(__file__).resolve().parents[1] / "praxon"
OUT = CHART / "values.schema.json"
CATALOG_OUT = CHART / "catalog.yaml"
sys.path.insert(0, str(CHART.parents[1]))  # the repository: services.catalog

from services import catalog  # noqa: E402


def serving_sections() -> list[str]:
    """Services whose settings have a serving queue bound (max_queued): config.serving.<name>.maxQueued."""
    from services.common.spec import resolve

    return [s.name for s in catalog.SPECS if s.settings and "max_queued" in resolve(s.settings).model_fields]


def obj(props: dict, desc: str = "", required: list[str] | None = None, **extra) -> dict:
    out = {"type": "object", "additionalProperties": False, "properties": props}
    if desc:
        out["description"] = desc
    if required:
        out["required"] = required
    out.update(extra)
    return out


def s(desc: str, **kw) -> dict:
    return {"type": "string", "description": desc, **kw}


def b(desc: str) -> dict:
    return {"type": "boolean", "description": desc}


def i(desc: str, minimum: int | None = 0, maximum: int | None = None) -> dict:
    out = {"type": "integer", "description": desc}
    if minimum is not None:
        out["minimum"] = minimum
    if maximum is not None:
        out["maximum"] = maximum
    return out


def n(desc: str, exclusive_min: float | None = None, minimum: float | None = None) -> dict:
    out = {"type": "number", "description": desc}
    if exclusive_min is not None:
        out["exclusiveMinimum"] = exclusive_min
    if minimum is not None:
        out["minimum"] = minimum
    return out


def ref(name: str, desc: str = "") -> dict:
    out = {"$ref": f"#/definitions/{name}"}
    if desc:  # documentation only: draft-07 validators ignore siblings of $ref
        out["description"] = desc
    return out


def free(desc: str, typ: str = "object") -> dict:
    return {"type": typ, "description": desc}


PORT = {"type": "integer", "minimum": 1, "maximum": 65535}
K8S_NAME = {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63}

definitions = {
    "port": {**PORT, "description": "TCP port (1-65535)"},
    "replicas": {"type": "integer", "minimum": 0, "description": "Replica count (>= 0)"},
    "quantity": {"oneOf": [{"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?$"},
                           {"type": "number", "minimum": 0}],
                 "description": "Kubernetes resource quantity"},
    "resources": {
        "type": "object", "additionalProperties": False, "description": "Container resource requests and limits",
        "properties": {
            "requests": {"type": "object", "additionalProperties": {"$ref": "#/definitions/quantity"}},
            "limits": {"type": "object", "additionalProperties": {"$ref": "#/definitions/quantity"}},
        },
    },
    "stringMap": {"type": "object", "additionalProperties": {"type": "string"}},
    "envVars": {"type": "array", "description": "List of EnvVar",
                "items": {"type": "object", "required": ["name"],
                          "properties": {"name": {"type": "string", "minLength": 1}}}},
    "tolerations": {"type": "array", "items": {"type": "object"}, "description": "Tolerations"},
    "gpu": obj({
        "enabled": b("Request GPUs (also selects the CUDA image)"),
        "count": i("GPUs per pod", minimum=1),
        "resourceName": s("Extended resource name of the GPU", minLength=1),
    }, "GPU request"),
    "pdb": obj({"create": b("Create a PodDisruptionBudget"),
                "maxUnavailable": {"oneOf": [{"type": "integer", "minimum": 0},
                                             {"type": "string", "pattern": "^[0-9]+%$"}],
                                   "description": "PodDisruptionBudget maxUnavailable"}}, "PodDisruptionBudget"),
    "probeTiming": obj({
        "initialDelaySeconds": i("Initial delay"), "periodSeconds": i("Period", minimum=1),
        "timeoutSeconds": i("Timeout", minimum=1), "failureThreshold": i("Failure threshold", minimum=1),
    }),
    "service": obj({
        "enabled": b("Deploy this gRPC service"),
        "replicaCount": ref("replicas", "Replicas (ignored when autoscaling is enabled)"),
        "resources": ref("resources"),
        "autoscaling": obj({
            "enabled": b("Create a HorizontalPodAutoscaler"),
            "minReplicas": i("HPA minimum replicas", minimum=1),
            "maxReplicas": i("HPA maximum replicas", minimum=1),
            "targetCPUUtilizationPercentage": i("HPA target CPU utilisation", minimum=1, maximum=100),
        }),
        "pdb": ref("pdb"),
        "service": obj({
            "type": s("Service type", enum=["ClusterIP", "NodePort", "LoadBalancer"]),
            "port": ref("port"),
            "annotations": ref("stringMap"),
        }),
        "podAnnotations": ref("stringMap"), "podLabels": ref("stringMap"),
        "nodeSelector": ref("stringMap"), "tolerations": ref("tolerations"), "affinity": free("Affinity"),
        "extraEnvVars": ref("envVars"),
    }, "A gRPC service (`praxon serve <name>`)"),
    "worker": obj({
        "enabled": b("Run a worker for this queue"),
        "replicaCount": ref("replicas"),
        "concurrency": i("Celery worker concurrency", minimum=1),
        "pool": s("Celery pool", enum=["prefork", "solo", "threads"]),
        "resources": ref("resources"),
        "gpu": ref("gpu"),
        "nodeSelector": ref("stringMap"), "tolerations": ref("tolerations"), "affinity": free("Affinity"),
        "pdb": ref("pdb"),
        "podAnnotations": ref("stringMap"),
        "livenessProbe": free("Custom liveness probe (Probe object)"),
        "extraEnvVars": ref("envVars"),
        "terminationGracePeriodSeconds": i("Seconds a worker gets to finish its current job step on shutdown"),
    }, "A job worker (`praxon worker --queues <queue>`)"),
    "inferenceService": obj({
        "name": {**K8S_NAME, "maxLength": 45, "description": "InferenceService name (DNS label, <= 45 chars)"},
        "predictor": {**K8S_NAME, "description": "praxon predictor kind (services/catalog.py)"},
        "tenant": s("Tenant id that owns the model", minLength=1),
        "model": s("Model name, name:version or name@alias in the registry", minLength=1),
        "minReplicas": i("Minimum replicas (0 enables scale-to-zero in Serverless mode)"),
        "maxReplicas": i("Maximum replicas", minimum=1),
        "scaleMetric": s("Autoscaling metric", enum=["cpu", "memory", "concurrency", "rps"]),
        "scaleTarget": i("Autoscaling target", minimum=1),
        "resources": ref("resources"),
        "gpu": ref("gpu"),
        "nodeSelector": ref("stringMap"), "tolerations": ref("tolerations"),
    }, "A served model", required=["name", "predictor", "tenant", "model", "minReplicas", "maxReplicas"]),
    "storeImage": obj({"registry": s("Registry"), "repository": s("Repository", minLength=1),
                       "tag": s("Tag (never \"latest\")", minLength=1, **{"not": {"const": "latest"}})}),
    "persistence": obj({"enabled": b("Use a PersistentVolumeClaim"), "size": ref("quantity"),
                        "storageClass": s("Storage class")}),
}

schema = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "praxon chart values",
    "type": "object",
    "additionalProperties": False,
    "definitions": definitions,
    "properties": {
        "global": obj({"imageRegistry": s("Registry override for every image"),
                       "imagePullSecrets": {"type": "array", "items": {"type": "string"},
                                            "description": "Pull secret names"}}, "Global parameters"),
        "nameOverride": s("Chart name override"),
        "fullnameOverride": s("Full name override"),
        "commonLabels": ref("stringMap", "Labels on every resource"),
        "commonAnnotations": ref("stringMap", "Annotations on every resource"),
        "image": obj({
            "registry": s("Registry"), "repository": s("Repository", minLength=1),
            "tag": s("Tag (defaults to appVersion; never \"latest\")", **{"not": {"const": "latest"}}),
            "digest": s("Digest", pattern="^(sha256:[a-f0-9]{64})?$"),
            "cudaTagSuffix": s("Tag suffix of the CUDA image"),
            "pullPolicy": s("Pull policy", enum=["Always", "IfNotPresent", "Never"]),
        }, "praxon image"),
        "config": obj({
            "logLevel": s("Log level", enum=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]),
            "databasePoolMax": i("Pool size", minimum=1),
            "metricsPort": ref("port", "Metrics port"),
            "grpc": obj({
                "port": ref("port", "gRPC port"),
                "maxMessageBytes": i("Max message bytes", minimum=1024),
                "graceSeconds": n("Shutdown grace", minimum=0),
                "defaultDeadlineSeconds": n("Default deadline", exclusive_min=0),
                "requestsPerSecondPerToken": n("Calls per second per token (0: unlimited)", minimum=0),
                "requestBurstPerToken": i("Burst per token", minimum=1),
                "authCacheSeconds": n("Token cache lifetime", minimum=0),
                "authNegativeCacheSeconds": n("Unknown-token cache lifetime", minimum=0),
                "tls": obj({"enabled": b("Serve TLS"), "existingSecret": s("kubernetes.io/tls Secret"),
                            "clientAuth": b("Require client certificates (mTLS)")}),
            }),
            "jobs": obj({
                "leaseSeconds": n("Lease", exclusive_min=0), "heartbeatSeconds": n("Heartbeat", exclusive_min=0),
                "reaperIntervalSeconds": n("Reaper interval", exclusive_min=0),
                "maxAttempts": i("Max attempts", minimum=1),
                "maxActivePerTenant": i("Unfinished jobs per tenant (0: no limit)"),
                "maxActivePerTenantKind": i("Unfinished jobs per tenant and kind (0: no limit)"),
            }),
            "serving": obj({name: obj({"maxQueued": i("Queued requests beyond the running ones", minimum=1)})
                            for name in serving_sections()}),
        }, "Non-secret PRAXON_* settings"),
        "database": obj({"url": s("External PostgreSQL URL", pattern="^(postgres(ql)?://.*)?$"),
                         "existingSecret": s("Existing Secret"), "existingSecretKey": s("Key", minLength=1)}),
        "broker": obj({"url": s("External broker URL", pattern="^((redis|rediss|amqp|amqps|pyamqp)://.*)?$"),
                       "existingSecret": s("Existing Secret"), "existingSecretKey": s("Key", minLength=1)}),
        "objectStorage": obj({
            "endpoint": s("host:port", pattern="^([^/:]+(:[0-9]+)?)?$"),
            "bucket": s("Bucket", pattern="^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"),
            "secure": b("TLS"), "region": s("Region"),
            "presignSeconds": i("Presign lifetime", minimum=1, maximum=3600),
            "multipartBytes": i("Part size", minimum=5 * 1024 * 1024),
            "accessKey": s("Access key"), "secretKey": s("Secret key"), "existingSecret": s("Existing Secret"),
            "existingSecretAccessKeyKey": s("Key", minLength=1), "existingSecretSecretKeyKey": s("Key", minLength=1),
        }),
        "extraEnvVars": ref("envVars"),
        "extraEnvVarsCM": s("ConfigMap name"),
        "extraEnvVarsSecret": s("Secret name"),
        "serviceAccount": obj({"create": b("Create"), "name": s("Name"), "annotations": ref("stringMap"),
                               "automountServiceAccountToken": b("Mount the token")}),
        "podSecurityContext": {
            "type": "object", "description": "Pod security context (must run as non-root)",
            "required": ["runAsNonRoot"],
            "properties": {"runAsNonRoot": {"const": True}, "runAsUser": i("UID", minimum=1)},
        },
        "containerSecurityContext": {
            "type": "object", "description": "Container security context (must run as non-root)",
            "required": ["runAsNonRoot"],
            "properties": {"runAsNonRoot": {"const": True}, "runAsUser": i("UID", minimum=1),
                           "privileged": {"const": False}, "allowPrivilegeEscalation": {"const": False}},
        },
        "tmpVolume": obj({"sizeLimit": ref("quantity")}),
        "grpcProbes": obj({"liveness": ref("probeTiming"), "readiness": ref("probeTiming"),
                           "startup": ref("probeTiming")}),
        "serviceDefaults": ref("service", "What every gRPC service takes unless its services.<name> entry says otherwise"),
        "services": {"type": "object", "description": "Per service of services/catalog.py: keys of serviceDefaults",
                     "propertyNames": {"enum": catalog.names()}, "additionalProperties": ref("service")},
        "workerDefaults": ref("worker", "What every worker takes unless its workers.<queue> entry says otherwise"),
        "workers": {"type": "object", "description": "Per job queue of services/catalog.py: keys of workerDefaults",
                    "propertyNames": {"enum": list(catalog.queues())}, "additionalProperties": ref("worker")},
        "console": obj({
            "enabled": b("Deploy the web console (`praxon console`)"),
            "port": ref("port", "Port the console listens on"),
            "secureCookies": b("Mark the session cookie Secure (HTTPS or port-forward to localhost)"),
            "service": obj({"type": s("Service type", enum=["ClusterIP", "NodePort", "LoadBalancer"]),
                            "port": ref("port"), "annotations": ref("stringMap")}),
            "resources": ref("resources"), "podAnnotations": ref("stringMap"), "nodeSelector": ref("stringMap"),
            "tolerations": ref("tolerations"), "affinity": free("Affinity"), "extraEnvVars": ref("envVars"),
        }, "The read-only web console"),
        "migrations": obj({"enabled": b("Run the hook"), "backoffLimit": i("Retries"),
                           "activeDeadlineSeconds": i("Deadline", minimum=1), "resources": ref("resources"),
                           "podAnnotations": ref("stringMap")}),
        "kserve": obj({
            "enabled": b("Render KServe objects"),
            "deploymentMode": s("Deployment mode", enum=["RawDeployment", "Serverless", "Standard", "Knative"]),
            "httpPort": ref("port"), "grpcPort": ref("port"),
            "runtimeResources": ref("resources"),
            "inferenceServices": {"type": "array", "items": ref("inferenceService"),
                                  "description": "Served models"},
        }),
        "metrics": obj({"serviceMonitor": obj({
            "enabled": b("Create a ServiceMonitor"), "namespace": s("Namespace"),
            "interval": s("Interval", pattern="^[0-9]+(ms|s|m|h)$"),
            "scrapeTimeout": s("Timeout", pattern="^[0-9]+(ms|s|m|h)$"),
            "labels": ref("stringMap")})}),
        "networkPolicy": obj({
            "enabled": b("Create NetworkPolicies"), "allowExternal": b("Any pod may call the services"),
            "metricsNamespaceSelector": ref("stringMap"),
            "egress": obj({"restrict": b("Restrict egress"),
                           "extraTo": {"type": "array", "items": {"type": "object"}}}),
        }),
        "postgresql": obj({"enabled": b("Bundle PostgreSQL"), "image": ref("storeImage"),
                           "auth": obj({"username": s("User", minLength=1), "database": s("Database", minLength=1),
                                        "password": s("Password")}),
                           "persistence": ref("persistence"), "resources": ref("resources")}),
        "redis": obj({"enabled": b("Bundle Redis"), "image": ref("storeImage"),
                      "auth": obj({"password": s("Password")}),
                      "persistence": ref("persistence"), "resources": ref("resources")}),
        "minio": obj({"enabled": b("Bundle MinIO"), "image": ref("storeImage"),
                      "auth": obj({"rootUser": s("Root user"), "rootPassword": s("Root password")}),
                      "persistence": ref("persistence"), "resources": ref("resources")}),
    },
}


def render() -> str:
    return json.dumps(schema, indent=2) + "\n"


def render_catalog() -> str:
    """helm/praxon/catalog.yaml: what the templates deploy (services.yaml, workers.yaml, the ConfigMap)."""
    lines = ["# Written by helm/tools/gen_schema.py from services/catalog.py; do not edit.",
             "services: [" + ", ".join(catalog.names()) + "]",
             "queues: [" + ", ".join(catalog.queues()) + "]",
             "serving: [" + ", ".join(serving_sections()) + "]"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    OUT.write_text(render())
    CATALOG_OUT.write_text(render_catalog())
    print(f"wrote {OUT} and {CATALOG_OUT}")
