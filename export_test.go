package job

// SetPruneBatch sets how many records one store call of retention removes
// per rule, so a test can put retention behind with a few records.
func SetPruneBatch(m *Manager, n int) { m.cfg.pruneBatch = n }
