package etcdstore

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobkit/job/store"
)

// Named documents (store.Documents) live under
//
//	P doc/<collection>/<name>   value = "<created ns> <updated ns> <body>"
//
// the name as it is (it is the last part of the key, and a collection
// name holds no "/"), so a range read lists a collection in byte order of
// name. A document's Version is its key's ModRevision: etcd's revisions
// only grow, so a version is never given twice, across deletes too. Each
// write is a transaction that compares the ModRevision read.

func (k keys) docPrefix(coll string) string      { return k.p + "doc/" + coll + "/" }
func (k keys) document(coll, name string) string { return k.p + "doc/" + coll + "/" + name }

// maxDocTxnOps bounds the operations of one prune transaction, below
// etcd's default --max-txn-ops (128).
const maxDocTxnOps = 100

// decodeDocument decodes the stored value of coll/name at revision rev.
func decodeDocument(coll, name string, raw []byte, rev int64) (*store.Document, error) {
	cs, rest, ok1 := bytes.Cut(raw, []byte(" "))
	us, body, ok2 := bytes.Cut(rest, []byte(" "))
	created, err1 := strconv.ParseInt(string(cs), 10, 64)
	updated, err2 := strconv.ParseInt(string(us), 10, 64)
	if !ok1 || !ok2 || err1 != nil || err2 != nil {
		return nil, fmt.Errorf("%w: etcdstore: document %q of collection %s: malformed stored value; delete it (without IfVersion) or overwrite it with AnyVersion", store.ErrCorrupt, name, coll)
	}
	return &store.Document{
		Collection: coll, Name: name, Body: bytes.Clone(body), Version: rev,
		CreatedAt: time.Unix(0, created).UTC(), UpdatedAt: time.Unix(0, updated).UTC(),
	}, nil
}

// PutDocument implements store.Documents.
func (s *Store) PutDocument(ctx context.Context, p *store.PutDocumentParams) (*store.Document, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("etcdstore: put document: %w", err)
	}
	octx, cancel, err := s.op(ctx)
	if err != nil {
		return nil, s.wrap("put document", ctx, err)
	}
	defer cancel()
	ctx = octx
	key := s.k.document(p.Collection, p.Name)
	now := p.Now.UnixNano()
	for {
		resp, err := s.cli.Get(ctx, key)
		if err != nil {
			return nil, s.wrap("put document", ctx, err)
		}
		var have int64
		created := now
		if len(resp.Kvs) > 0 {
			kv := resp.Kvs[0]
			have = kv.ModRevision
			if old, err := decodeDocument(p.Collection, p.Name, kv.Value, kv.ModRevision); err == nil {
				created = old.CreatedAt.UnixNano()
			} else if p.IfVersion != store.AnyVersion {
				return nil, err
			}
		}
		if p.IfVersion != store.AnyVersion && p.IfVersion != have {
			return nil, fmt.Errorf("etcdstore: %w", store.DocumentConflict(p.Collection, p.Name, p.IfVersion, have))
		}
		val := strconv.FormatInt(created, 10) + " " + strconv.FormatInt(now, 10) + " " + string(p.Body)
		tr, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", have)).
			Then(clientv3.OpPut(key, val)).Commit()
		if err != nil {
			return nil, s.wrap("put document", ctx, err)
		}
		if tr.Succeeded {
			return &store.Document{
				Collection: p.Collection, Name: p.Name, Body: bytes.Clone(p.Body), Version: tr.Header.Revision,
				CreatedAt: time.Unix(0, created).UTC(), UpdatedAt: time.Unix(0, now).UTC(),
			}, nil
		}
		// Changed since the read: decide again on what is there now.
	}
}

// GetDocument implements store.Documents.
func (s *Store) GetDocument(ctx context.Context, collection, name string) (*store.Document, error) {
	if err := store.CheckCollection(collection); err != nil {
		return nil, fmt.Errorf("etcdstore: get document: %w", err)
	}
	octx, cancel, err := s.op(ctx)
	if err != nil {
		return nil, s.wrap("get document", ctx, err)
	}
	defer cancel()
	resp, err := s.cli.Get(octx, s.k.document(collection, name))
	if err != nil {
		return nil, s.wrap("get document", ctx, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("etcdstore: %w", store.DocumentNotFound(collection, name))
	}
	return decodeDocument(collection, name, resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
}

// ListDocuments implements store.Documents with one range read. Values
// that cannot be decoded are left out and named in an error wrapping
// store.ErrCorrupt, returned with the rest of the page.
func (s *Store) ListDocuments(ctx context.Context, p *store.ListDocumentsParams) (*store.DocumentPage, error) {
	limit, err := p.Validate()
	if err != nil {
		return nil, fmt.Errorf("etcdstore: list documents: %w", err)
	}
	octx, cancel, err := s.op(ctx)
	if err != nil {
		return nil, s.wrap("list documents", ctx, err)
	}
	defer cancel()
	pre := s.k.docPrefix(p.Collection)
	from, incl := p.Start()
	start := pre + from
	if !incl && from != "" {
		start += "\x00"
	}
	end := clientv3.GetPrefixRangeEnd(pre + p.Prefix)
	resp, err := s.cli.Get(octx, start, clientv3.WithRange(end), clientv3.WithLimit(int64(limit)+1))
	if err != nil {
		return nil, s.wrap("list documents", ctx, err)
	}
	kvs := resp.Kvs
	page := &store.DocumentPage{Documents: make([]*store.Document, 0, min(len(kvs), limit))}
	if len(kvs) > limit {
		kvs = kvs[:limit]
		page.Next = strings.TrimPrefix(string(kvs[limit-1].Key), pre)
	}
	var bad []string
	for _, kv := range kvs {
		name := strings.TrimPrefix(string(kv.Key), pre)
		d, err := decodeDocument(p.Collection, name, kv.Value, kv.ModRevision)
		if err != nil {
			bad = append(bad, strconv.Quote(name))
			continue
		}
		page.Documents = append(page.Documents, d)
	}
	if len(bad) > 0 {
		return page, fmt.Errorf("%w: etcdstore: the stored documents %s of collection %s cannot be decoded; delete them", store.ErrCorrupt, strings.Join(bad, ", "), p.Collection)
	}
	return page, nil
}

// DeleteDocument implements store.Documents.
func (s *Store) DeleteDocument(ctx context.Context, p *store.DeleteDocumentParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("etcdstore: delete document: %w", err)
	}
	octx, cancel, err := s.op(ctx)
	if err != nil {
		return s.wrap("delete document", ctx, err)
	}
	defer cancel()
	key := s.k.document(p.Collection, p.Name)
	var cmp []clientv3.Cmp
	if p.IfVersion != 0 {
		cmp = append(cmp, clientv3.Compare(clientv3.ModRevision(key), "=", p.IfVersion))
	}
	tr, err := s.cli.Txn(octx).If(cmp...).Then(clientv3.OpDelete(key)).Else(clientv3.OpGet(key, clientv3.WithKeysOnly())).Commit()
	if err != nil {
		return s.wrap("delete document", ctx, err)
	}
	if tr.Succeeded {
		if tr.Responses[0].GetResponseDeleteRange().Deleted == 0 {
			return fmt.Errorf("etcdstore: %w", store.DocumentNotFound(p.Collection, p.Name))
		}
		return nil
	}
	kvs := tr.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return fmt.Errorf("etcdstore: %w", store.DocumentNotFound(p.Collection, p.Name))
	}
	return fmt.Errorf("etcdstore: %w", store.DocumentConflict(p.Collection, p.Name, p.IfVersion, kvs[0].ModRevision))
}

// PruneDocuments implements store.Documents: it counts, reads the names
// to delete at one revision, and deletes them in transactions of at most
// maxDocTxnOps keys. A document written after that read is deleted only
// if it was among them; one created meanwhile is not.
func (s *Store) PruneDocuments(ctx context.Context, p *store.PruneDocumentsParams) (int, error) {
	limit, err := p.Validate()
	if err != nil {
		return 0, fmt.Errorf("etcdstore: prune documents: %w", err)
	}
	octx, cancel, err := s.op(ctx)
	if err != nil {
		return 0, s.wrap("prune documents", ctx, err)
	}
	defer cancel()
	ctx = octx
	pre := s.k.docPrefix(p.Collection)
	end := clientv3.GetPrefixRangeEnd(pre)
	total, err := s.cli.Get(ctx, pre, clientv3.WithRange(end), clientv3.WithCountOnly())
	if err != nil {
		return 0, s.wrap("prune documents", ctx, err)
	}
	before := int64(0)
	if p.Before != "" {
		r, err := s.cli.Get(ctx, pre, clientv3.WithRange(pre+p.Before), clientv3.WithCountOnly(), clientv3.WithRev(total.Header.Revision))
		if err != nil {
			return 0, s.wrap("prune documents", ctx, err)
		}
		before = r.Count
	}
	n := p.PruneCount(int(total.Count), int(before), limit)
	if n == 0 {
		return 0, nil
	}
	names, err := s.cli.Get(ctx, pre, clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithLimit(int64(n)), clientv3.WithRev(total.Header.Revision))
	if err != nil {
		return 0, s.wrap("prune documents", ctx, err)
	}
	deleted := 0
	for i := 0; i < len(names.Kvs); i += maxDocTxnOps {
		batch := names.Kvs[i:min(i+maxDocTxnOps, len(names.Kvs))]
		ops := make([]clientv3.Op, len(batch))
		for j, kv := range batch {
			ops[j] = clientv3.OpDelete(string(kv.Key))
		}
		tr, err := s.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return deleted, s.wrap("prune documents", ctx, err)
		}
		for _, r := range tr.Responses {
			deleted += int(r.GetResponseDeleteRange().Deleted)
		}
	}
	return deleted, nil
}
