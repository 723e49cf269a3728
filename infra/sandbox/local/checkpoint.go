package local

// checkpointReason says why a jail keeps files only (boxes.FilesOnly).
const checkpointReason = "files only: a jail's processes are host processes, which only CRIU could save, and threadbox does not drive CRIU for jails"
