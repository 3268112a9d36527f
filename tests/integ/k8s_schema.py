"""k8s_schema.py - an offline check of Kubernetes manifests, stdlib + PyYAML.

validate(doc) returns a list of "path: problem" strings (empty: good) for
one manifest. It knows the kinds the examples use (ConfigMap, Secret,
Service, Deployment, NetworkPolicy and the Prometheus operator's
PodMonitor) by their official field names (the Kubernetes API reference,
v1.29-v1.31, and monitoring.coreos.com/v1), and checks:

- unknown fields, wherever a type is described here (a misspelled
  `periodSecond` or `allowPrivilegeEscalaton` is an error, not ignored as
  the API server's non-strict decoding would); a few deep types that the
  examples do not use (affinity, lifecycle, relabelings...) are accepted
  whole, without a look inside;
- required fields, and scalar types (string, integer, boolean, an
  int-or-string port, a map of strings);
- apiVersion against kind;
- for Deployments, the Pod Security "restricted" level of the pod template
  (restricted_problems(): its baseline part too).

It is not the API server: defaults, immutability and cross-object
references are not checked (the tests check the references they rely on).
"""

ANY = object()  # a type accepted whole
STR, INT, BOOL, NUM = "string", "integer", "boolean", "number"
INT_OR_STR = "int-or-string"
STR_MAP = "map of strings"


class Obj:
    """An object type: fields {name: type}, required names."""

    def __init__(self, fields, required=()):
        self.fields = fields
        self.required = tuple(required)


class ListOf:
    def __init__(self, item):
        self.item = item


class MapOf:
    def __init__(self, item):
        self.item = item


def _obj(required=(), **fields):
    return Obj(fields, required)


LABEL_SELECTOR = _obj(
    matchLabels=STR_MAP,
    matchExpressions=ListOf(_obj(("key", "operator"), key=STR, operator=STR,
                                 values=ListOf(STR))))

OBJECT_META = _obj(
    name=STR, generateName=STR, namespace=STR, labels=STR_MAP, annotations=STR_MAP,
    finalizers=ListOf(STR), ownerReferences=ANY)

KEY_TO_PATH = _obj(("key", "path"), key=STR, path=STR, mode=INT)
KEY_SELECTOR = _obj(("key",), key=STR, name=STR, optional=BOOL)

ENV_VAR = _obj(
    ("name",), name=STR, value=STR,
    valueFrom=_obj(
        fieldRef=_obj(("fieldPath",), apiVersion=STR, fieldPath=STR),
        resourceFieldRef=_obj(("resource",), containerName=STR, resource=STR,
                              divisor=INT_OR_STR),
        configMapKeyRef=KEY_SELECTOR, secretKeyRef=KEY_SELECTOR))

HTTP_GET = _obj(
    ("port",), path=STR, port=INT_OR_STR, host=STR, scheme=STR,
    httpHeaders=ListOf(_obj(("name", "value"), name=STR, value=STR)))

PROBE = _obj(
    exec=_obj(command=ListOf(STR)), httpGet=HTTP_GET,
    tcpSocket=_obj(("port",), port=INT_OR_STR, host=STR),
    grpc=_obj(("port",), port=INT, service=STR),
    initialDelaySeconds=INT, timeoutSeconds=INT, periodSeconds=INT, successThreshold=INT,
    failureThreshold=INT, terminationGracePeriodSeconds=INT)

SECCOMP = _obj(("type",), type=STR, localhostProfile=STR)
APPARMOR = _obj(("type",), type=STR, localhostProfile=STR)
SE_LINUX = _obj(user=STR, role=STR, type=STR, level=STR)
WINDOWS = _obj(gmsaCredentialSpecName=STR, gmsaCredentialSpec=STR, runAsUserName=STR,
               hostProcess=BOOL)

SECURITY_CONTEXT = _obj(
    capabilities=_obj(add=ListOf(STR), drop=ListOf(STR)), privileged=BOOL,
    seLinuxOptions=SE_LINUX, windowsOptions=WINDOWS, runAsUser=INT, runAsGroup=INT,
    runAsNonRoot=BOOL, readOnlyRootFilesystem=BOOL, allowPrivilegeEscalation=BOOL,
    procMount=STR, seccompProfile=SECCOMP, appArmorProfile=APPARMOR)

POD_SECURITY_CONTEXT = _obj(
    seLinuxOptions=SE_LINUX, windowsOptions=WINDOWS, runAsUser=INT, runAsGroup=INT,
    runAsNonRoot=BOOL, supplementalGroups=ListOf(INT), supplementalGroupsPolicy=STR,
    fsGroup=INT, fsGroupChangePolicy=STR,
    sysctls=ListOf(_obj(("name", "value"), name=STR, value=STR)),
    seccompProfile=SECCOMP, appArmorProfile=APPARMOR)

CONTAINER = _obj(
    ("name",), name=STR, image=STR, command=ListOf(STR), args=ListOf(STR), workingDir=STR,
    ports=ListOf(_obj(("containerPort",), name=STR, hostPort=INT, containerPort=INT,
                      protocol=STR, hostIP=STR)),
    envFrom=ANY, env=ListOf(ENV_VAR),
    resources=_obj(limits=MapOf(INT_OR_STR), requests=MapOf(INT_OR_STR), claims=ANY),
    resizePolicy=ANY, restartPolicy=STR,
    volumeMounts=ListOf(_obj(("name", "mountPath"), name=STR, readOnly=BOOL,
                             recursiveReadOnly=STR, mountPath=STR, subPath=STR,
                             mountPropagation=STR, subPathExpr=STR)),
    volumeDevices=ANY, livenessProbe=PROBE, readinessProbe=PROBE, startupProbe=PROBE,
    lifecycle=ANY, terminationMessagePath=STR, terminationMessagePolicy=STR,
    imagePullPolicy=STR, securityContext=SECURITY_CONTEXT, stdin=BOOL, stdinOnce=BOOL,
    tty=BOOL)

# The volume sources the restricted level allows are described; the others
# are known names, accepted whole (and refused by restricted_problems()).
RESTRICTED_VOLUMES = ("configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                      "persistentVolumeClaim", "projected", "secret")
VOLUME = _obj(
    ("name",), name=STR,
    emptyDir=_obj(medium=STR, sizeLimit=INT_OR_STR),
    configMap=_obj(name=STR, items=ListOf(KEY_TO_PATH), defaultMode=INT, optional=BOOL),
    secret=_obj(secretName=STR, items=ListOf(KEY_TO_PATH), defaultMode=INT, optional=BOOL),
    projected=ANY, downwardAPI=ANY, persistentVolumeClaim=_obj(
        ("claimName",), claimName=STR, readOnly=BOOL),
    csi=ANY, ephemeral=ANY,
    **{k: ANY for k in ("hostPath", "nfs", "iscsi", "image", "awsElasticBlockStore",
                        "gcePersistentDisk", "gitRepo", "glusterfs", "rbd", "flexVolume",
                        "cinder", "cephfs", "flocker", "fc", "azureFile", "azureDisk",
                        "vsphereVolume", "quobyte", "photonPersistentDisk",
                        "portworxVolume", "scaleIO", "storageos")})

POD_SPEC = _obj(
    ("containers",),
    volumes=ListOf(VOLUME), initContainers=ListOf(CONTAINER), containers=ListOf(CONTAINER),
    ephemeralContainers=ANY, restartPolicy=STR, terminationGracePeriodSeconds=INT,
    activeDeadlineSeconds=INT, dnsPolicy=STR, nodeSelector=STR_MAP,
    serviceAccountName=STR, serviceAccount=STR, automountServiceAccountToken=BOOL,
    nodeName=STR, hostNetwork=BOOL, hostPID=BOOL, hostIPC=BOOL,
    shareProcessNamespace=BOOL, securityContext=POD_SECURITY_CONTEXT,
    imagePullSecrets=ListOf(_obj(name=STR)), hostname=STR, subdomain=STR, affinity=ANY,
    schedulerName=STR, tolerations=ANY, hostAliases=ANY, priorityClassName=STR,
    priority=INT, dnsConfig=ANY, readinessGates=ANY, runtimeClassName=STR,
    enableServiceLinks=BOOL, preemptionPolicy=STR, overhead=ANY,
    topologySpreadConstraints=ANY, setHostnameAsFQDN=BOOL, os=_obj(("name",), name=STR),
    hostUsers=BOOL, schedulingGates=ANY, resourceClaims=ANY)

DEPLOYMENT_SPEC = _obj(
    ("selector", "template"), replicas=INT, selector=LABEL_SELECTOR,
    template=_obj(("spec",), metadata=OBJECT_META, spec=POD_SPEC), strategy=ANY,
    minReadySeconds=INT, revisionHistoryLimit=INT, paused=BOOL,
    progressDeadlineSeconds=INT)

NETWORK_POLICY_PORT = _obj(protocol=STR, port=INT_OR_STR, endPort=INT)
# "except" and "from" are Python keywords: these two are spelled as dicts.
NETWORK_POLICY_PEER = _obj(podSelector=LABEL_SELECTOR, namespaceSelector=LABEL_SELECTOR,
                           ipBlock=Obj({"cidr": STR, "except": ListOf(STR)}, ("cidr",)))

NETWORK_POLICY_SPEC = _obj(
    ("podSelector",), podSelector=LABEL_SELECTOR,
    ingress=ListOf(Obj({"from": ListOf(NETWORK_POLICY_PEER),
                        "ports": ListOf(NETWORK_POLICY_PORT)})),
    egress=ListOf(_obj(to=ListOf(NETWORK_POLICY_PEER), ports=ListOf(NETWORK_POLICY_PORT))),
    policyTypes=ListOf(STR))

SERVICE_SPEC = _obj(
    ports=ListOf(_obj(("port",), name=STR, protocol=STR, appProtocol=STR, port=INT,
                      targetPort=INT_OR_STR, nodePort=INT)),
    selector=STR_MAP, clusterIP=STR, clusterIPs=ListOf(STR), type=STR,
    externalIPs=ListOf(STR), sessionAffinity=STR, loadBalancerIP=STR,
    loadBalancerSourceRanges=ListOf(STR), externalName=STR, externalTrafficPolicy=STR,
    healthCheckNodePort=INT, publishNotReadyAddresses=BOOL, sessionAffinityConfig=ANY,
    ipFamilies=ListOf(STR), ipFamilyPolicy=STR, allocateLoadBalancerNodePorts=BOOL,
    loadBalancerClass=STR, internalTrafficPolicy=STR, trafficDistribution=STR)

POD_METRICS_ENDPOINT = _obj(
    port=STR, portNumber=INT, targetPort=INT_OR_STR, path=STR, scheme=STR,
    params=MapOf(ListOf(STR)), interval=STR, scrapeTimeout=STR, honorLabels=BOOL,
    honorTimestamps=BOOL, trackTimestampsStaleness=BOOL, metricRelabelings=ANY,
    relabelings=ANY, proxyUrl=STR, followRedirects=BOOL, enableHttp2=BOOL,
    filterRunning=BOOL, basicAuth=ANY, bearerTokenSecret=ANY, oauth2=ANY, tlsConfig=ANY,
    authorization=ANY)

POD_MONITOR_SPEC = _obj(
    ("selector",), jobLabel=STR, podTargetLabels=ListOf(STR),
    podMetricsEndpoints=ListOf(POD_METRICS_ENDPOINT), selector=LABEL_SELECTOR,
    namespaceSelector=_obj(any=BOOL, matchNames=ListOf(STR)), sampleLimit=INT,
    targetLimit=INT, labelLimit=INT, labelNameLengthLimit=INT, labelValueLengthLimit=INT,
    keepDroppedTargets=INT, attachMetadata=_obj(node=BOOL), scrapeProtocols=ListOf(STR),
    scrapeClass=STR, bodySizeLimit=STR)

_HEAD = dict(apiVersion=STR, kind=STR, metadata=OBJECT_META)
KINDS = {
    "ConfigMap": ("v1", Obj(dict(_HEAD, data=STR_MAP, binaryData=STR_MAP, immutable=BOOL),
                            ("apiVersion", "kind", "metadata"))),
    "Secret": ("v1", Obj(dict(_HEAD, data=STR_MAP, stringData=STR_MAP, type=STR,
                              immutable=BOOL), ("apiVersion", "kind", "metadata"))),
    "Service": ("v1", Obj(dict(_HEAD, spec=SERVICE_SPEC, status=ANY),
                          ("apiVersion", "kind", "metadata"))),
    "Deployment": ("apps/v1", Obj(dict(_HEAD, spec=DEPLOYMENT_SPEC, status=ANY),
                                  ("apiVersion", "kind", "metadata", "spec"))),
    "NetworkPolicy": ("networking.k8s.io/v1", Obj(dict(_HEAD, spec=NETWORK_POLICY_SPEC),
                                                  ("apiVersion", "kind", "metadata",
                                                   "spec"))),
    "PodMonitor": ("monitoring.coreos.com/v1", Obj(dict(_HEAD, spec=POD_MONITOR_SPEC),
                                                   ("apiVersion", "kind", "metadata",
                                                    "spec"))),
}


def _check(value, typ, path, out):
    if typ is ANY:
        return
    if isinstance(typ, Obj):
        if not isinstance(value, dict):
            out.append("%s: want an object" % path)
            return
        for name in typ.required:
            if name not in value:
                out.append("%s: missing required field %s" % (path, name))
        for name, v in value.items():
            if name not in typ.fields:
                out.append("%s.%s: unknown field" % (path, name))
            else:
                _check(v, typ.fields[name], "%s.%s" % (path, name), out)
    elif isinstance(typ, ListOf):
        if not isinstance(value, list):
            out.append("%s: want a list" % path)
            return
        for i, v in enumerate(value):
            _check(v, typ.item, "%s[%d]" % (path, i), out)
    elif isinstance(typ, MapOf):
        if not isinstance(value, dict):
            out.append("%s: want a map" % path)
            return
        for k, v in value.items():
            _check(v, typ.item, "%s.%s" % (path, k), out)
    elif typ == STR_MAP:
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            out.append("%s: want a map of strings (quote numbers and yes/no)" % path)
    elif typ == STR:
        if not isinstance(value, str):
            out.append("%s: want a string" % path)
    elif typ == BOOL:
        if not isinstance(value, bool):
            out.append("%s: want a boolean" % path)
    elif typ == INT:
        if not isinstance(value, int) or isinstance(value, bool):
            out.append("%s: want an integer" % path)
    elif typ == INT_OR_STR:
        if not isinstance(value, (int, str)) or isinstance(value, bool):
            out.append("%s: want an integer or a string" % path)
    else:
        raise ValueError("unknown type %r at %s" % (typ, path))


def restricted_problems(pod, path="spec.template.spec"):
    """What keeps a pod spec from the Pod Security "restricted" level."""
    out = []
    psc = pod.get("securityContext") or {}
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(flag):
            out.append("%s.%s: not allowed" % (path, flag))
    for i, v in enumerate(pod.get("volumes") or []):
        kinds = [k for k in v if k != "name"]
        if not kinds or any(k not in RESTRICTED_VOLUMES for k in kinds):
            out.append("%s.volumes[%d]: volume type %s not allowed" % (path, i, kinds))
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    if pod_seccomp not in (None, "RuntimeDefault", "Localhost"):
        out.append("%s.securityContext.seccompProfile.type: must be RuntimeDefault or "
                   "Localhost" % path)
    if psc.get("runAsUser") == 0:
        out.append("%s.securityContext.runAsUser: must not be 0" % path)
    if psc.get("sysctls"):
        out.append("%s.securityContext.sysctls: not allowed" % path)
    for group in ("initContainers", "containers", "ephemeralContainers"):
        for i, c in enumerate(pod.get(group) or []):
            cp = "%s.%s[%d]" % (path, group, i)
            sc = c.get("securityContext") or {}
            if sc.get("allowPrivilegeEscalation") is not False:
                out.append("%s.securityContext.allowPrivilegeEscalation: must be false" % cp)
            if sc.get("privileged"):
                out.append("%s.securityContext.privileged: not allowed" % cp)
            caps = sc.get("capabilities") or {}
            if "ALL" not in (caps.get("drop") or []):
                out.append("%s.securityContext.capabilities.drop: must include ALL" % cp)
            extra = [a for a in caps.get("add") or [] if a != "NET_BIND_SERVICE"]
            if extra:
                out.append("%s.securityContext.capabilities.add: %s not allowed" % (cp, extra))
            non_root = sc.get("runAsNonRoot", psc.get("runAsNonRoot"))
            if non_root is not True:
                out.append("%s.securityContext.runAsNonRoot: must be true (here or in the "
                           "pod's)" % cp)
            if sc.get("runAsUser") == 0:
                out.append("%s.securityContext.runAsUser: must not be 0" % cp)
            seccomp = (sc.get("seccompProfile") or {}).get("type", pod_seccomp)
            if seccomp not in ("RuntimeDefault", "Localhost"):
                out.append("%s.securityContext.seccompProfile.type: must be RuntimeDefault "
                           "or Localhost (here or in the pod's)" % cp)
            for j, p in enumerate(c.get("ports") or []):
                if p.get("hostPort"):
                    out.append("%s.ports[%d].hostPort: not allowed" % (cp, j))
            if sc.get("procMount") not in (None, "Default"):
                out.append("%s.securityContext.procMount: must be Default" % cp)
    return out


def validate(doc):
    """Problems of one manifest (a dict from yaml.safe_load), as "path: problem"."""
    if not isinstance(doc, dict):
        return ["(document): want an object"]
    kind = doc.get("kind")
    if kind not in KINDS:
        return ["kind: %r is not one this checker knows (%s)" % (kind, ", ".join(KINDS))]
    api, schema = KINDS[kind]
    out = []
    if doc.get("apiVersion") != api:
        out.append("apiVersion: %s wants %s, not %r" % (kind, api, doc.get("apiVersion")))
    _check(doc, schema, kind, out)
    if not isinstance(doc.get("metadata"), dict) or "name" not in doc["metadata"]:
        out.append("%s.metadata: missing required field name" % kind)
    if kind == "Deployment":
        pod = (((doc.get("spec") or {}).get("template") or {}).get("spec")) or {}
        out += restricted_problems(pod)
    return out
