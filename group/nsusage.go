package group

// WaitersByNamespace returns, per namespace, the blocked acquires queued
// on the groups this node masters (namespaces with none are absent): the
// counts the waiter bounds and quotas check, read under their lock.
func (s *Service) WaitersByNamespace() map[string]int64 {
	s.use.mu.Lock()
	defer s.use.mu.Unlock()
	out := make(map[string]int64, len(s.use.nss))
	for ns, c := range s.use.nss {
		if c[useWait] > 0 {
			out[ns] = int64(c[useWait])
		}
	}
	return out
}
