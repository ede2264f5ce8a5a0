package etcdstore

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobkit/job/store"
)

// Named documents (store.Documents) live under
//
//	P doc/<collection>/<name>   value = "v<version> <created ns> <updated ns> <body>"
//	P docg/<collection>         value = the greatest version of a document
//	                            of the collection deleted or pruned
//
// the name as it is (it is the last part of the key, and a collection
// name holds no "/"), so a range read lists a collection in byte order of
// name. A document counts its own versions; a new one starts above the
// collection's docg, so one deleted and created again never meets a
// version of its earlier life. Each write is a transaction that compares
// the ModRevisions read. A value written by an earlier version of this
// store ("<created ns> <updated ns> <body>", no "v") has its key's
// ModRevision as version.

func (k keys) docPrefix(coll string) string      { return k.p + "doc/" + coll + "/" }
func (k keys) document(coll, name string) string { return k.p + "doc/" + coll + "/" + name }
func (k keys) docGone(coll string) string        { return k.p + "docg/" + coll }

// maxDocTxnOps bounds the operations of one prune transaction, below
// etcd's default --max-txn-ops (128).
const maxDocTxnOps = 100

// decodeDocument decodes the stored value of coll/name at revision rev.
func decodeDocument(coll, name string, raw []byte, rev int64) (*store.Document, error) {
	ver := rev
	if rest, ok := bytes.CutPrefix(raw, []byte("v")); ok {
		vs, after, ok := bytes.Cut(rest, []byte(" "))
		v, err := strconv.ParseInt(string(vs), 10, 64)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("%w: etcdstore: document %q of collection %s: malformed stored value; delete it (without IfVersion) or overwrite it with AnyVersion", store.ErrCorrupt, name, coll)
		}
		ver, raw = v, after
	}
	cs, rest, ok1 := bytes.Cut(raw, []byte(" "))
	us, body, ok2 := bytes.Cut(rest, []byte(" "))
	created, err1 := strconv.ParseInt(string(cs), 10, 64)
	updated, err2 := strconv.ParseInt(string(us), 10, 64)
	if !ok1 || !ok2 || err1 != nil || err2 != nil {
		return nil, fmt.Errorf("%w: etcdstore: document %q of collection %s: malformed stored value; delete it (without IfVersion) or overwrite it with AnyVersion", store.ErrCorrupt, name, coll)
	}
	return &store.Document{
		Collection: coll, Name: name, Body: bytes.Clone(body), Version: ver,
		CreatedAt: time.Unix(0, created).UTC(), UpdatedAt: time.Unix(0, updated).UTC(),
	}, nil
}

// docRead is a document's key and its collection's docg read at one
// revision.
type docRead struct {
	rev, goneRev int64 // ModRevisions (0: absent)
	gone         int64 // docg's value
	kv           *mvccpb.KeyValue
}

// readDoc reads coll/name and its collection's docg at one revision.
func (s *Store) readDoc(ctx context.Context, coll, name string) (docRead, error) {
	key, gk := s.k.document(coll, name), s.k.docGone(coll)
	tr, err := s.cli.Txn(ctx).Then(clientv3.OpGet(key), clientv3.OpGet(gk)).Commit()
	if err != nil {
		return docRead{}, err
	}
	var r docRead
	if kvs := tr.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		r.kv, r.rev = kvs[0], kvs[0].ModRevision
	}
	if kvs := tr.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
		r.goneRev = kvs[0].ModRevision
		r.gone, _ = strconv.ParseInt(string(kvs[0].Value), 10, 64)
	}
	return r, nil
}

// raiseGone sets coll's docg to top if it is below.
func (s *Store) raiseGone(ctx context.Context, coll string, top int64) error {
	gk := s.k.docGone(coll)
	for {
		resp, err := s.cli.Get(ctx, gk)
		if err != nil {
			return err
		}
		var rev, gone int64
		if len(resp.Kvs) > 0 {
			rev = resp.Kvs[0].ModRevision
			gone, _ = strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
		}
		if top <= gone {
			return nil
		}
		tr, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(gk), "=", rev)).
			Then(clientv3.OpPut(gk, strconv.FormatInt(top, 10))).Commit()
		if err != nil || tr.Succeeded {
			return err
		}
	}
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
	key, gk := s.k.document(p.Collection, p.Name), s.k.docGone(p.Collection)
	now := p.Now.UnixNano()
	for {
		r, err := s.readDoc(ctx, p.Collection, p.Name)
		if err != nil {
			return nil, s.wrap("put document", ctx, err)
		}
		var have int64
		created, ver := now, r.gone+1
		if r.kv != nil {
			have = r.kv.ModRevision
			if old, err := decodeDocument(p.Collection, p.Name, r.kv.Value, r.kv.ModRevision); err == nil {
				created, have, ver = old.CreatedAt.UnixNano(), old.Version, old.Version+1
			} else if p.IfVersion != store.AnyVersion {
				return nil, err
			}
		}
		if p.IfVersion != store.AnyVersion && p.IfVersion != have {
			return nil, fmt.Errorf("etcdstore: %w", store.DocumentConflict(p.Collection, p.Name, p.IfVersion, have))
		}
		val := "v" + strconv.FormatInt(ver, 10) + " " + strconv.FormatInt(created, 10) + " " + strconv.FormatInt(now, 10) + " " + string(p.Body)
		tr, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", r.rev), clientv3.Compare(clientv3.ModRevision(gk), "=", r.goneRev)).
			Then(clientv3.OpPut(key, val)).Commit()
		if err != nil {
			return nil, s.wrap("put document", ctx, err)
		}
		if tr.Succeeded {
			return &store.Document{
				Collection: p.Collection, Name: p.Name, Body: bytes.Clone(p.Body), Version: ver,
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
	key, gk := s.k.document(p.Collection, p.Name), s.k.docGone(p.Collection)
	for {
		r, err := s.readDoc(octx, p.Collection, p.Name)
		if err != nil {
			return s.wrap("delete document", ctx, err)
		}
		if r.kv == nil {
			return fmt.Errorf("etcdstore: %w", store.DocumentNotFound(p.Collection, p.Name))
		}
		have := r.kv.ModRevision
		if old, err := decodeDocument(p.Collection, p.Name, r.kv.Value, r.kv.ModRevision); err == nil {
			have = old.Version
		}
		if p.IfVersion != 0 && p.IfVersion != have {
			return fmt.Errorf("etcdstore: %w", store.DocumentConflict(p.Collection, p.Name, p.IfVersion, have))
		}
		ops := []clientv3.Op{clientv3.OpDelete(key)}
		if have > r.gone {
			ops = append(ops, clientv3.OpPut(gk, strconv.FormatInt(have, 10)))
		}
		tr, err := s.cli.Txn(octx).If(clientv3.Compare(clientv3.ModRevision(key), "=", r.rev), clientv3.Compare(clientv3.ModRevision(gk), "=", r.goneRev)).
			Then(ops...).Commit()
		if err != nil {
			return s.wrap("delete document", ctx, err)
		}
		if tr.Succeeded {
			return nil
		}
		// Changed since the read: decide again on what is there now.
	}
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
			ops[j] = clientv3.OpDelete(string(kv.Key), clientv3.WithPrevKV())
		}
		tr, err := s.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return deleted, s.wrap("prune documents", ctx, err)
		}
		var top int64
		for _, r := range tr.Responses {
			dr := r.GetResponseDeleteRange()
			deleted += int(dr.Deleted)
			for _, kv := range dr.PrevKvs {
				if d, err := decodeDocument(p.Collection, "", kv.Value, kv.ModRevision); err == nil {
					top = max(top, d.Version)
				}
			}
		}
		// Not in the deleting transaction (its keys are many): a name
		// created again between the two may start below its pruned life.
		// Pruned collections name documents by time, and never do.
		if err := s.raiseGone(ctx, p.Collection, top); err != nil {
			return deleted, s.wrap("prune documents", ctx, err)
		}
	}
	return deleted, nil
}
