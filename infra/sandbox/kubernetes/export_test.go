package kubernetes

// SetWriteExtentsOp makes CopyFile ask the target for op instead of
// write-extents: one the agent does not know stands for an older agent.
func (f *Files) SetWriteExtentsOp(op string) { f.writeExtentsOp = op }

// SetOpenExtentsOp makes Open and CopyFile ask the source for op instead
// of open-extents: one the agent does not know stands for an older agent.
func (f *Files) SetOpenExtentsOp(op string) { f.openExtentsOp = op }
