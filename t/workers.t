#!/usr/bin/perl
# Two worker processes share one limit exactly: concurrent clients spread
# over both workers, exactly `limit` requests admitted.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use HTTP::Tiny;
use RLTest;

my $t = RLTest->new();
$t->write_conf(<<'EOF', workers => 2);
ratelimit_zone z 1m;
server {
    listen 127.0.0.1:%%PORT%% reuseport;
    location / {
        ratelimit zone=z key=shared limit=50 period=1h;
        add_header X-Worker $pid always;
    }
}
EOF
$t->start();

my ($clients, $each) = (8, 40);
my @kids;
for my $c (1 .. $clients) {
    pipe(my $rd, my $wr) or die "pipe: $!";
    my $pid = fork() // die "fork: $!";
    if ($pid == 0) {
        close $rd;
        my $http = HTTP::Tiny->new(keep_alive => 0, timeout => 10);
        for (1 .. $each) {
            my $r = $http->get('http://127.0.0.1:' . $t->port . '/index.html');
            print $wr "$r->{status} ", ($r->{headers}{'x-worker'} // '-'), "\n";
        }
        close $wr;
        POSIX::_exit(0);
    }
    close $wr;
    push @kids, [ $pid, $rd ];
}

my (%status, %worker);
for my $k (@kids) {
    my ($pid, $rd) = @$k;
    while (my $line = <$rd>) {
        my ($s, $w) = split ' ', $line;
        $status{$s}++;
        $worker{$w}++;
    }
    waitpid($pid, 0);
}

is($status{200}, 50, 'exactly the limit admitted across both workers');
is($status{429}, $clients * $each - 50, 'every other request rejected');
is(scalar(keys %worker), 2, 'both workers served requests');

$t->stop();
done_testing();
