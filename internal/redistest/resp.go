package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// A RedisError is an error reply from Redis (a RESP "-" line), returned by
// [Server.Do].
type RedisError string

// Error returns the reply's text, e.g. "ERR unknown command".
func (e RedisError) Error() string { return string(e) }

// conn is a minimal RESP2 client: enough to probe and configure servers
// without a client library (and without any goroutine).
type conn struct {
	c net.Conn
	r *bufio.Reader
}

const (
	dialTimeout = 500 * time.Millisecond
	ioTimeout   = 5 * time.Second
)

func dial(addr string) (*conn, error) {
	c, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		return nil, err
	}
	return &conn{c: c, r: bufio.NewReader(c)}, nil
}

func (c *conn) Close() error { return c.c.Close() }

// send writes commands without reading their replies (a pipeline).
func (c *conn) send(cmds ...[]string) error {
	var b []byte
	for _, args := range cmds {
		b = append(b, '*')
		b = strconv.AppendInt(b, int64(len(args)), 10)
		b = append(b, '\r', '\n')
		for _, a := range args {
			b = append(b, '$')
			b = strconv.AppendInt(b, int64(len(a)), 10)
			b = append(b, '\r', '\n')
			b = append(b, a...)
			b = append(b, '\r', '\n')
		}
	}
	if err := c.c.SetDeadline(time.Now().Add(ioTimeout)); err != nil {
		return err
	}
	_, err := c.c.Write(b)
	return err
}

// do sends one command and reads its reply. An error reply is returned as a
// RedisError.
func (c *conn) do(args ...string) (any, error) {
	if err := c.send(args); err != nil {
		return nil, err
	}
	return c.read()
}

// read reads one reply: string for simple and bulk strings, int64 for
// integers, nil for a null, []any for arrays and RedisError for errors.
func (c *conn) read() (any, error) {
	line, err := c.r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("malformed reply line %q", line)
	}
	kind, body := line[0], line[1:len(line)-2]
	switch kind {
	case '+':
		return body, nil
	case '-':
		return nil, RedisError(body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$', '*':
		n, err := strconv.Atoi(body)
		if err != nil {
			what := "bulk"
			if kind == '*' {
				what = "array"
			}
			return nil, fmt.Errorf("malformed %s length %q", what, body)
		}
		if n < 0 {
			return nil, nil // a null bulk string or array
		}
		if kind == '$' {
			buf := make([]byte, n+2)
			if _, err := io.ReadFull(c.r, buf); err != nil {
				return nil, err
			}
			return string(buf[:n]), nil
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = c.read(); err != nil {
				var re RedisError
				if !errors.As(err, &re) {
					return nil, err
				}
				out[i] = re
			}
		}
		return out, nil
	default:
		return nil, fmt.Errorf("unexpected reply type %q", kind)
	}
}

// doString runs a command whose reply is a string.
func doString(addr string, args ...string) (string, error) {
	c, err := dial(addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	v, err := c.do(args...)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s: reply %T, want a string", args[0], v)
	}
	return s, nil
}

// infoField returns the value of field in an INFO (or CLUSTER INFO) reply.
func infoField(info, field string) (string, bool) {
	for line := range strings.SplitSeq(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimRight(line, "\r"), ":")
		if ok && k == field {
			return v, true
		}
	}
	return "", false
}
