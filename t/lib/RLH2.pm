package RLH2;
# A bare HTTP/2 client over cleartext (h2c, prior knowledge) for the tests
# that need what curl does not do on demand: a request sent, then its
# stream reset (RST_STREAM, CANCEL) while it runs, the connection kept open
# meanwhile, as a browser does when a page is left.  Header fields are sent
# as HPACK literals without indexing (RFC 7541 6.2.2), nothing compressed.
#
#   RLH2::missing()             why nginx cannot serve h2c here, or ''
#   RLH2::listen_line($addr)    the server block's listen lines for h2c
#   RLH2::reset_after($port, $path, $headers, $seconds)
use strict;
use warnings;
use IO::Socket::INET;
use IO::Select;
use Time::HiRes qw(sleep);

sub missing {
    my $nginx = $ENV{RL_NGINX} // '/usr/sbin/nginx';
    my $v = `$nginx -V 2>&1`;
    return $v =~ /--with-http_v2_module/ ? '' : "$nginx has no HTTP/2 module (--with-http_v2_module)";
}

# The nginx under test's version as a number: 1.25.1 is 1025001.
sub nginx_version {
    my $nginx = $ENV{RL_NGINX} // '/usr/sbin/nginx';
    my ($a, $b, $c) = `$nginx -v 2>&1` =~ m{nginx/(\d+)\.(\d+)\.(\d+)} or return 0;
    return $a * 1000000 + $b * 1000 + $c;
}

# "listen ... http2" before nginx 1.25.1, "http2 on" from it (the listen
# parameter warns there).
sub listen_line {
    my ($addr) = @_;
    return nginx_version() >= 1025001 ? "listen $addr;\n    http2 on;" : "listen $addr http2;";
}

sub frame {
    my ($type, $flags, $stream, $payload) = @_;
    my $len = length $payload;
    return pack('CnCCN', $len >> 16, $len & 0xffff, $type, $flags, $stream) . $payload;
}

sub literal {
    my ($name, $value) = @_;
    return "\x00" . chr(length $name) . $name . chr(length $value) . $value;
}

# Sends GET $path on stream 1, resets the stream after $seconds, keeps the
# connection a moment longer (so that the reset, not a close, ends the
# request), then closes it.  Returns the bytes the server sent.
sub reset_after {
    my ($port, $path, $headers, $seconds) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp')
        or die "RLH2: connect: $!\n";
    binmode $s;
    my $block = literal(':method', 'GET') . literal(':scheme', 'http') . literal(':path', $path)
              . literal(':authority', "127.0.0.1:$port");
    $block .= literal(lc $_, $headers->{$_}) for sort keys %$headers;
    syswrite($s, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" . frame(4, 0, 0, '') . frame(1, 0x5, 1, $block));
    my $got = drain($s, $seconds);
    syswrite($s, frame(3, 0, 1, pack('N', 0x8)));   # RST_STREAM, CANCEL
    $got .= drain($s, 0.3);
    close $s;
    return $got;
}

sub drain {
    my ($s, $seconds) = @_;
    my $sel = IO::Select->new($s);
    my $got = '';
    my $until = Time::HiRes::time() + $seconds;
    while ((my $left = $until - Time::HiRes::time()) > 0) {
        last unless $sel->can_read($left);
        sysread($s, $got, 65536, length $got) or last;
    }
    return $got;
}

1;
