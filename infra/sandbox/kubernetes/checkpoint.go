package kubernetes

// checkpointReason says why a pod keeps files only (boxes.FilesOnly).
const checkpointReason = "files only: Kubernetes cannot restore a pod from a checkpoint (the kubelet's checkpoint API writes an archive for forensics only); a stopped pod boots fresh over its claim"
