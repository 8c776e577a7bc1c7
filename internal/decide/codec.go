package decide

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// lenientCodec is the binary protobuf codec of the RLS and Connect
// servers. It differs from the stock one in one way: a request whose
// string fields hold invalid UTF-8 is read anyway, the bytes kept as they
// are, instead of failing the call.
//
// Why: proto3 requires UTF-8 in strings, but Envoy builds descriptor
// values from request headers, which may hold any byte, and its C++
// protobuf sends them as they are. Go's protobuf refuses such a message,
// the call fails before the limiter sees it, and Envoy's default
// failure_mode_deny: false lets a failed call through: one byte 0xff in an
// e-mail header was a way past every limit. Read leniently, the subject is
// decided on its digest (event.CanonicalSubject) like any other subject
// that is not valid as it stands. Valid messages take the stock path.
//
// The method set is both gRPC's encoding.Codec and connect's Codec.
type lenientCodec struct{}

func (lenientCodec) Name() string { return "proto" }

func (lenientCodec) Marshal(v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("marshal %T: not a protobuf message", v)
	}
	return proto.Marshal(m)
}

func (lenientCodec) Unmarshal(b []byte, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("unmarshal %T: not a protobuf message", v)
	}
	err := proto.Unmarshal(b, m)
	if err == nil || utf8.Valid(b) {
		return err
	}
	proto.Reset(m)
	if lerr := unmarshalLenient(b, m.ProtoReflect(), 0); lerr != nil {
		return errors.Join(err, lerr)
	}
	return nil
}

// maxLenientDepth bounds the nesting the lenient reader follows: a request
// nests three deep (request, descriptor, entry).
const maxLenientDepth = 8

// unmarshalLenient merges the wire message b into m, taking string fields'
// bytes as they are and reading nested messages the same way; every other
// field goes through the stock decoder.
func unmarshalLenient(b []byte, m protoreflect.Message, depth int) error {
	if depth > maxLenientDepth {
		return errors.New("message nested too deep")
	}
	fields := m.Descriptor().Fields()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		vn := protowire.ConsumeFieldValue(num, typ, b[n:])
		if vn < 0 {
			return protowire.ParseError(vn)
		}
		field, value := b[:n+vn], b[n:n+vn]
		b = b[n+vn:]
		fd := fields.ByNumber(num)
		switch {
		case fd != nil && typ == protowire.BytesType && fd.Kind() == protoreflect.StringKind && !fd.IsMap():
			v, _ := protowire.ConsumeBytes(value)
			s := protoreflect.ValueOfString(string(v))
			if fd.IsList() {
				m.Mutable(fd).List().Append(s)
			} else {
				m.Set(fd, s)
			}
		case fd != nil && typ == protowire.BytesType && fd.Kind() == protoreflect.MessageKind && !fd.IsMap():
			v, _ := protowire.ConsumeBytes(value)
			var sub protoreflect.Message
			if fd.IsList() {
				// The element is a pointer: filled after it is appended.
				list := m.Mutable(fd).List()
				el := list.NewElement()
				list.Append(el)
				sub = el.Message()
			} else {
				sub = m.Mutable(fd).Message()
			}
			if err := unmarshalLenient(v, sub, depth+1); err != nil {
				return err
			}
		default:
			if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(field, m.Interface()); err != nil {
				return err
			}
		}
	}
	return nil
}
