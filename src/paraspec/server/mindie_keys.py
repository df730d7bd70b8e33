"""The keys of MindIE Service's config.json that are valid in a MindIE file but mean nothing to
paraspec (TLS, NPU ids, block sizes, ...): config_loader.py accepts them without a warning, per section."""
from __future__ import annotations

TOP = {"Version", "LogConfig", "ServerConfig", "BackendConfig", "EnableDynamicAdjustTimeoutConfig"}
LOG = {"logLevel", "logFileSize", "logFileNum", "logPath"}
SERVER = {
    "managementIpAddress", "managementPort", "metricsPort", "fullTextEnabled", "inferMode", "openAiSupport",
    "distDPServerEnabled", "tlsCaPath", "tlsCaFile", "tlsCert", "tlsPk", "tlsPkPwd", "tlsCrl", "tlsCrlPath",
    "tlsCrlFiles", "managementTlsCaFile", "managementTlsCert", "managementTlsPk", "managementTlsPkPwd",
    "managementTlsCrl", "managementTlsCrlPath", "managementTlsCrlFiles", "kmcKsfMaster", "kmcKsfStandby",
    "interCommTLSEnabled", "interCommPort", "interCommTlsCaPath", "interCommTlsCaFiles", "interCommTlsCert",
    "interCommPk", "interCommPkPwd", "interCommTlsCrlPath", "interCommTlsCrlFiles"}
BACKEND = {
    "backendName", "modelInstanceNumber", "npuDeviceIds", "tokenizerProcessNumber", "multiNodesInferEnabled",
    "multiNodesInferPort", "interNodeTLSEnabled", "interNodeTlsCaPath", "interNodeTlsCaFiles", "interNodeTlsCert",
    "interNodeTlsPk", "interNodeTlsPkPwd", "interNodeTlsCrlPath", "interNodeTlsCrlFiles", "interNodeKmcKsfMaster",
    "interNodeKmcKsfStandby"}
DEPLOY = {"maxLoraRank", "LoraModules"}
MODEL = {"modelInstanceType", "worldSize", "cpuMemSize", "npuMemSize", "backendType", "trustRemoteCode",
         "tp", "dp", "sp", "cp", "moe_tp", "moe_ep", "async_scheduler_wait_time"}
SCHEDULE = {"templateType", "templateName", "cacheBlockSize", "maxPrefillBatchSize", "maxPrefillTokens",
            "prefillTimeMsPerReq", "prefillPolicyType", "decodeTimeMsPerReq", "decodePolicyType",
            "maxPreemptCount", "supportSelectBatch", "maxQueueDelayMicroseconds", "maxFirstTokenWaitTime"}
