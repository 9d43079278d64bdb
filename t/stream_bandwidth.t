#!/usr/bin/perl
# ratelimit_bandwidth in nginx's stream {}: a byte rate per key shared by
# the key's proxied sessions, in each direction, through Debian's nginx and
# its stream proxy, with a real upstream on loopback and clients reading
# (or the upstream reading) as fast as they can; rates measured from the
# clock:
#
#   * one key, one session, rate=1m burst=1m, 4 MB from the upstream: the
#     first MB at once, then 1 MB/s +-5%;
#   * 4 sessions of one key share 1 MB/s (+-10% together), over both
#     workers; proxy_download_rate 1m gives each its own 1 MB/s;
#   * two keys at once, 2 sessions each: each key 1 MB/s +-10%;
#   * a key's 4 sessions, 2 closed by the client halfway: the other 2 take
#     the whole rate within 0.5 s;
#   * direction=in: 3 MB from the client reach the upstream at 1 MB/s +-10%
#     (the upstream's clock), while the way back is not paced;
#   * direction=both: the bytes of both ways together at the rate;
#   * after=: the first bytes of a session's direction at once;
#   * nginx -t: a Redis zone, an undeclared one, a bad direction.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use IO::Select;
use IO::Socket::INET;
use Time::HiRes qw(time sleep);
use RLTest;
use RLRate qw(bytes_at rate_of within first_done);
use RLStream;

my $MB = 1024 * 1024;

# The upstream: a line from the client says what to do.
#   "get N"  it sends N bytes, then closes;
#   "put N"  it reads N bytes, then answers the times it read them at
#            ("t:bytes ..." from its first read), then closes;
#   "both N" both at once: N bytes each way, its reads' times answered
#            once all came, after the N bytes it sent.
my $upp = RLTest::free_port();
my $listen = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => $upp, Listen => 1024, ReuseAddr => 1)
    or die "listen: $!";
my $up = RLTest::tcp_server($listen, sub {
    my ($c) = @_;
    my $line = '';
    while ($line !~ /\n/) {
        sysread($c, $line, 1, length $line) or return;
    }
    my ($what, $n) = $line =~ /^(\w+) (\d+)/ or return;
    if ($what eq 'get') {
        my $chunk = 'x' x 65536;
        my $left = $n;
        while ($left > 0) {
            my $w = syswrite($c, $chunk, $left < 65536 ? $left : 65536);
            last unless $w;
            $left -= $w;
        }
        return;
    }
    my $sel = IO::Select->new($c);
    $c->blocking(0);
    my ($got, $start, @samples) = (0);
    my $out = $what eq 'both' ? 'x' x $n : '';
    while ($got < $n || length $out) {
        my ($r, $w) = IO::Select->select($sel, length $out ? $sel : undef, undef, 10);
        last unless $r || $w;
        if ($w && @$w && length $out) {
            my $k = syswrite($c, $out, 65536);
            substr($out, 0, $k, '') if $k;
        }
        next unless $r && @$r;
        my $k = sysread($c, my $buf, 1 << 20);
        last unless $k;
        my $now = time;
        $start //= $now;
        $got += $k;
        push @samples, sprintf('%.4f:%d', $now - $start, $got);
    }
    $c->blocking(1);
    syswrite($c, join(' ', @samples) . "\n");
});
END { local $?; if ($up) { kill "KILL", -$up; waitpid($up, 0) } }

my $t = RLTest->new;
my %p = map { $_ => RLTest::free_port() } qw(one shared plain up both after udp fast);
my $udp_up = RLStream::Upstream->new->start;
my $udpp = $udp_up->port;

my $stream = <<"EOF";
    ratelimit_zone z 1m;
    proxy_buffer_size 16k;
    server {
        listen 127.0.0.1:$p{one} reuseport;
        ratelimit_bandwidth zone=z key=\$remote_addr rate=1m burst=1m name=one;
        proxy_pass 127.0.0.1:$upp;
    }
    server {
        listen 127.0.0.1:$p{shared} reuseport;
        ratelimit_bandwidth zone=z key=\$remote_addr rate=1m name=shared;
        proxy_pass 127.0.0.1:$upp;
    }
    server {
        listen 127.0.0.1:$p{plain} reuseport;
        proxy_download_rate 1m;
        proxy_pass 127.0.0.1:$upp;
    }
    server {
        listen 127.0.0.1:$p{up} reuseport;
        ratelimit_bandwidth zone=z key=\$remote_addr rate=1m direction=in name=up;
        proxy_pass 127.0.0.1:$upp;
    }
    server {
        listen 127.0.0.1:$p{both} reuseport;
        ratelimit_bandwidth zone=z key=\$remote_addr rate=1m direction=both name=both;
        proxy_pass 127.0.0.1:$upp;
    }
    server {
        listen 127.0.0.1:$p{fast} reuseport;
        ratelimit_bandwidth zone=z key=\$remote_addr rate=48m name=fast;
        proxy_pass 127.0.0.1:$upp;
    }
    server {
        listen 127.0.0.1:$p{udp} udp;
        ratelimit_bandwidth zone=z key=\$remote_addr rate=8k burst=0 name=udp;
        proxy_timeout 5s;
        proxy_pass 127.0.0.1:$udpp;
    }
    server {
        listen 127.0.0.1:$p{after} reuseport;
        ratelimit_bandwidth zone=z key=\$remote_addr rate=256k after=1m name=after;
        proxy_pass 127.0.0.1:$upp;
    }
EOF

# nginx -t: what is refused, saying why
{
    my $main = sub { RLStream::main($t, $_[0]) };
    my $http = 'server { listen 127.0.0.1:%%PORT%%; location / { return 204; } }';
    my $refused = sub {
        my ($body, $re, $what) = @_;
        my ($rc, $out) = $t->test_conf($http, main => $main->($body));
        isnt($rc, 0, "nginx -t fails: $what");
        like($out, $re, "nginx -t names it: $what");
    };
    $refused->("ratelimit_zone r 1m redis=127.0.0.1:1;\n"
               . "server { listen 127.0.0.1:1; ratelimit_bandwidth zone=r key=\$remote_addr rate=1m; "
               . "proxy_pass 127.0.0.1:$upp; }",
               qr/"ratelimit_bandwidth" directive: zone=r is a Redis zone: .*expected a local zone/, 'a Redis zone');
    $refused->("server { listen 127.0.0.1:1; ratelimit_bandwidth zone=nope key=\$remote_addr rate=1m; "
               . "proxy_pass 127.0.0.1:$upp; }",
               qr/zone=nope is not declared: expected a "ratelimit_zone nope SIZE;" in the stream block/,
               'an undeclared zone');
    my ($rc, $out) = $t->test_conf(RLTest::one_location('ratelimit_bandwidth zone=s key=$remote_addr rate=1m;'),
                                   main => $main->('ratelimit_zone s 1m;'));
    isnt($rc, 0, 'nginx -t fails: an http rule naming a zone of the stream block');
    like($out, qr/zone "s" is declared in the stream block .*: a rule of the http block names a zone of the http block/,
         'nginx -t names it: a zone of the other block');
    $refused->("ratelimit_zone z 1m;\n"
               . "server { listen 127.0.0.1:1; ratelimit_bandwidth zone=z key=\$remote_addr rate=1m "
               . "direction=up; proxy_pass 127.0.0.1:$upp; }",
               qr/invalid direction "up": expected "out" \(toward the client\), "in" \(from it\) or "both"/,
               'a bad direction');
}

$t->start('server { listen 127.0.0.1:%%PORT%%; location /stats { ratelimit_stats; } '
          . 'location /rl/ { ratelimit_api; } }',
          main => RLStream::main($t, $stream), workers => 2);

# Sessions at once, each asking the upstream for $bytes and reading them as
# fast as they come: each [port, from address, bytes, close_at (seconds
# from the start; undef: to the end)].  Returns the start time and for each
# { bytes, done, samples => [[time, bytes so far]] }.
sub downloads {
    my @want = @_;
    my (@conn, %of);
    my $start = time;
    for my $w (@want) {
        my ($port, $from, $bytes, $close_at) = @$w;
        my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp',
                                      LocalAddr => $from) or die "connect: $!";
        syswrite($s, "get $bytes\n");
        $s->blocking(0);
        my $c = { sock => $s, bytes => 0, samples => [[$start, 0]], close_at => $close_at };
        push @conn, $c;
        $of{ fileno $s } = $c;
    }
    my $sel = IO::Select->new(map { $_->{sock} } @conn);
    while ($sel->count) {
        for my $s ($sel->can_read(0.05)) {
            my $c = $of{ fileno $s };
            my $n = sysread($s, my $buf, 1 << 20);
            next if !defined $n;
            my $now = time;
            if ($n == 0) {
                $c->{done} = $now;
                $sel->remove($s);
                close $s;
                next;
            }
            $c->{bytes} += $n;
            push @{ $c->{samples} }, [$now, $c->{bytes}];
        }
        my $now = time;
        for my $c (@conn) {
            next if $c->{done} || !defined $c->{close_at} || $now - $start < $c->{close_at};
            $c->{done} = $now;
            $sel->remove($c->{sock});
            close $c->{sock};
        }
    }
    return ($start, @conn);
}

# The upstream's reads of a "put" or "both" session, as samples.
sub upstream_samples {
    my ($line) = @_;
    return [map { [split /:/] } split ' ', $line];
}

# one key, one session, rate=1m burst=1m, 4 MB: the first MB at once,
# then 1 MB/s +-5%
{
    my ($start, $c) = downloads([$p{one}, '127.0.0.2', 4 * $MB]);
    is($c->{bytes}, 4 * $MB, 'one session: the whole transfer');
    cmp_ok(bytes_at($c, $start + 0.3), '>=', $MB, 'one session: the burst at once');
    cmp_ok($c->{done} - $start, '>', 2.8, sprintf('one session: 4 MB in %.2f s', $c->{done} - $start));
    within(rate_of($start + 1, $c->{done}, $c), $MB, 0.05, 'one session after the burst');
}

# a rate far above the proxy's 16 KB buffer a millisecond: 48 MB/s, not
# one buffer a timer tick (16 MB/s); at most the rate
{
    my ($start, $c) = downloads([$p{fast}, '127.0.0.12', 48 * $MB]);
    is($c->{bytes}, 48 * $MB, 'a fast rate: the whole transfer');
    my $rate = rate_of($start, $c->{done}, $c);
    ok($rate > 24 * $MB && $rate < 48 * 1.1 * $MB, sprintf('a fast rate: %.1f MB/s of 48', $rate / $MB));
}

# 4 sessions of one key (over both workers, by reuseport): 1 MB/s +-10%
# together; proxy_download_rate 1m gives each its own 1 MB/s
{
    my ($start, @c) = downloads(map { [$p{shared}, '127.0.0.3', $MB] } 1 .. 4);
    is(scalar(grep { $_->{bytes} == $MB } @c), 4, '4 sessions: each its whole transfer');
    within(rate_of($start + 0.3, first_done(@c), @c), $MB, 0.10, '4 sessions of a key together');
    my @each = map { rate_of($start + 0.3, first_done(@c), $_) } @c;
    is(scalar(grep { abs($_ - $MB / 4) <= $MB / 4 * 0.25 } @each), 4,
       '4 sessions: each within 25% of rate/4 (' . join(' ', map { sprintf '%.0fk', $_ / 1024 } @each) . ')');

    my ($ps, @pl) = downloads(map { [$p{plain}, '127.0.0.3', 2 * $MB] } 1 .. 4);
    my $plain = rate_of($ps, first_done(@pl), @pl);
    cmp_ok($plain, '>', 3 * $MB, sprintf('proxy_download_rate 1m: %.1f MB/s over 4 sessions', $plain / $MB));
}

# two keys at once, 2 sessions each: each key its own 1 MB/s
{
    my ($start, @c) = downloads((map { [$p{shared}, '127.0.0.4', $MB] } 1 .. 2),
                                (map { [$p{shared}, '127.0.0.5', $MB] } 1 .. 2));
    my $to = first_done(@c);
    within(rate_of($start + 0.3, $to, @c[0, 1]), $MB, 0.10, 'two keys: the first');
    within(rate_of($start + 0.3, $to, @c[2, 3]), $MB, 0.10, 'two keys: the second');
}

# a key's 4 sessions, 2 closed by the client at 1.5 s: the other 2 take
# the whole rate within 0.5 s
{
    my ($start, @c) = downloads([$p{shared}, '127.0.0.6', 4 * $MB, 1.5], [$p{shared}, '127.0.0.6', 4 * $MB, 1.5],
                                [$p{shared}, '127.0.0.6', 2 * $MB], [$p{shared}, '127.0.0.6', 2 * $MB]);
    my $end = $start + 1.5;
    within(rate_of($start + 0.3, $end, @c), $MB, 0.10, '4 sessions before 2 end');
    my $to = first_done(@c[2, 3]);
    cmp_ok($to - $end, '>', 1, 'the other 2 go on for more than a second');
    within(rate_of($end + 0.5, $to, @c[2, 3]), $MB, 0.10, 'the other 2 from 0.5 s after the end');
}

# direction=in: 3 MB from the client reach the upstream at 1 MB/s +-10%
# (measured by the upstream as it reads)
{
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $p{up}, Proto => 'tcp',
                                  LocalAddr => '127.0.0.7') or die "connect: $!";
    my $n = 3 * $MB;
    my $began = time;
    syswrite($s, "put $n\n");
    my $chunk = 'y' x 65536;
    for (1 .. $n / 65536) {
        my $off = 0;
        $off += syswrite($s, $chunk, 65536 - $off, $off) while $off < 65536;
    }
    my $line = RLStream::read_line($s, 15);
    close $s;
    my $samples = upstream_samples($line);
    my ($last) = $samples->[-1];
    is($last->[1], $n, 'direction=in: the upstream read every byte');
    my $c = { samples => $samples };
    within(rate_of(0.3, $last->[0], $c), $MB, 0.10, 'direction=in: the upstream reads at the rate');
    cmp_ok(time - $began, '>', 2.5, 'direction=in: the client took its time too');
}

# direction=in does not pace the way back: a download through it is fast
{
    my ($start, $c) = downloads([$p{up}, '127.0.0.7', 4 * $MB]);
    cmp_ok($c->{done} - $start, '<', 2, sprintf('direction=in: 4 MB down in %.2f s', $c->{done} - $start));
}

# direction=both: 1 MB each way at once; both together at 1 MB/s: the
# session takes about 2 s, not 1
{
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $p{both}, Proto => 'tcp',
                                  LocalAddr => '127.0.0.8') or die "connect: $!";
    my $n = $MB;
    my $began = time;
    syswrite($s, "both $n\n");
    my ($out, $in) = ('z' x $n, '');
    my $sel = IO::Select->new($s);
    $s->blocking(0);
    while (1) {
        my ($r, $w) = IO::Select->select($sel, length $out ? $sel : undef, undef, 10);
        last unless $r || $w;
        if ($w && @$w && length $out) {
            my $k = syswrite($s, $out, 65536);
            substr($out, 0, $k, '') if $k;
        }
        if ($r && @$r) {
            my $k = sysread($s, $in, 1 << 20, length $in);
            last unless $k;
        }
    }
    my $took = time - $began;
    is(length($in) > $n ? $n : length $in, $n, 'direction=both: the bytes back');
    # 2 MB at 1 MB/s, a slice at once each way: about 1.8 s
    ok($took > 1.6 && $took < 2.4, sprintf('direction=both: 1 MB each way in %.2f s', $took));
}

# after=1m rate=256k: the first MB of the session at once, the next at the
# rate
{
    my ($start, $c) = downloads([$p{after}, '127.0.0.9', $MB + 512 * 1024]);
    cmp_ok(bytes_at($c, $start + 0.4), '>=', $MB, 'after=: the first MB at once');
    my $took = $c->{done} - $start;
    ok($took > 1.6 && $took < 2.4, sprintf('after=: the next 512 KB at 256k a second, %.2f s in all', $took));
}

# UDP: a session's datagrams paced whole: 9 answers of 1003 bytes at 8k a
# second come one every 122 ms (the first at once), none cut
{
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $p{udp}, Proto => 'udp',
                                  LocalAddr => '127.0.0.11') or die "udp: $!";
    my $began = time;
    send($s, 'd' x 1000, 0) for 1 .. 9;
    my ($n, @sizes) = (0);
    my $sel = IO::Select->new($s);
    while ($n < 9 && $sel->can_read(5)) {
        recv($s, my $buf, 4096, 0);
        push @sizes, length $buf;
        $n++;
    }
    my $took = time - $began;
    is(join(' ', @sizes), join(' ', (1003) x 9), 'UDP: 9 answers, each whole');
    ok($took > 0.85 && $took < 1.4, sprintf('UDP: 8 of 1003 bytes at 8k a second, %.2f s', $took));
}

# the key API during a transfer: the key's rate and its sessions in
# flight; its top keys by bytes
{
    my $pid = RLTest::spawn(sub { downloads(map { [$p{shared}, '127.0.0.10', $MB] } 1 .. 3); return 1 });
    sleep 1.5;
    my $key = $t->key_rule('z', '127.0.0.10', 'shared');
    is($key->{kind}, 'bandwidth', 'key API: a stream bandwidth rule\'s key');
    is($key->{rate}, $MB, 'key API: its rate');
    is($key->{connections}, 3, 'key API: 3 sessions in flight');
    $pid->wait;
    my $top = $t->get_json('/rl/zones/z/top?rule=shared')->{rules}{shared};
    my @bytes = map { $_->{bytes} } @{ $top->{keys} };
    cmp_ok(scalar(@bytes), '>=', 5, 'top keys: the rule\'s keys');
    is_deeply(\@bytes, [sort { $b <=> $a } @bytes], 'top keys: most bytes first (' . join(' ', @bytes) . ')');
    ok(!exists $top->{refusals}, 'top keys: bytes, not refusals');
}

# the stats: the rules' bytes and connections
{
    my $r = $t->rule_stats('z', 'shared');
    cmp_ok($r->{bytes}, '>=', 4 * $MB + 2 * $MB, 'stats: the bytes the rule granted');
    is($r->{connections}, 0, 'stats: no session in flight once all ended');
}

done_testing;
