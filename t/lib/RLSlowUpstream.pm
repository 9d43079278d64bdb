package RLSlowUpstream;
# A slow HTTP upstream for the tests: each request is held for the time its
# X-Hold header asks (MS), else its URI (/hold/MS), then answered with the
# status of its X-Answer-Status header (200) and the header line of its
# X-Answer-Header, a process a connection, and the upstream counts the
# requests in flight (the most at once too) and when each started and ended
# (the request's X-Seq header names it), in files only it writes, under a
# lock.  Stopped at exit.
#
#   my $up = RLSlowUpstream->new->start;
#   ... proxy_pass http://127.0.0.1:$up->{port}/hold/1000; ...
#   $up->most;          # the most requests in flight at once
#   $up->in_flight;     # now
#   $up->events;        # ([seq, 'start'|'end', time], ...) in order
use strict;
use warnings;
use Fcntl qw(:flock);
use File::Temp qw(tempdir);
use IO::Socket::INET;
use Time::HiRes qw(time sleep);
use RLTest;

my @running;

sub new {
    my ($class) = @_;
    my $dir = tempdir('ngx-ratelimit-up-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    RLTest::write_file("$dir/count", "0 0\n");
    RLTest::write_file("$dir/events", '');
    return bless { dir => $dir, port => RLTest::free_port() }, $class;
}

sub port { $_[0]{port} }

sub start {
    my ($self) = @_;
    my $listen = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => $self->{port}, Listen => 1024,
                                       ReuseAddr => 1) or die "RLSlowUpstream: listen: $!\n";
    my $pid = RLTest::tcp_server($listen, sub { $self->serve($_[0]) });
    $self->{pid} = $pid;
    push @running, $pid;
    return $self;
}

sub serve {
    my ($self, $c) = @_;
    my $head = '';
    while ($head !~ /\r\n\r\n/) {
        sysread($c, $head, 4096, length $head) or return;
    }
    my ($ms) = $head =~ /^X-Hold: *(\d+)/mi;
    ($ms) = $head =~ m{^GET /hold/(\d+)} unless defined $ms;
    my ($seq) = $head =~ /^X-Seq: *(\S+)/mi;
    $seq //= '-';
    # the answer a request asks for: its status, and a header line
    my ($status) = $head =~ /^X-Answer-Status: *(\d{3})/mi;
    my ($extra) = $head =~ /^X-Answer-Header: *([^\r\n]+)/mi;
    $self->change(+1, "$seq start");
    sleep(($ms // 0) / 1000);
    $self->change(-1, "$seq end");
    $status //= 200;
    $extra = defined $extra ? "$extra\r\n" : '';
    print $c "HTTP/1.1 $status X\r\n${extra}Content-Length: 3\r\nConnection: close\r\n\r\nok\n";
    close $c;
}

# in flight by delta, and an event line, under the lock
sub change {
    my ($self, $delta, $event) = @_;
    my $lock = $self->locked or return;
    my ($now, $most) = split ' ', RLTest::read_file("$self->{dir}/count");
    $now += $delta;
    $most = $now if $now > $most;
    RLTest::write_file("$self->{dir}/count", "$now $most\n");
    open(my $ev, '>>', "$self->{dir}/events") or return;
    printf $ev "%s %.6f\n", $event, time;
    close $ev;
    close $lock;
}

# the counts as the last change left them (a reader without the lock may
# find the file emptied mid-write)
sub counts {
    my ($self) = @_;
    my $lock = $self->locked or return (0, 0);
    return split ' ', RLTest::read_file("$self->{dir}/count");
}

# the lock the counts are written under, held until the handle is dropped
sub locked {
    my ($self) = @_;
    open(my $lock, '>>', "$self->{dir}/lock") or return;   # the test is over
    flock($lock, LOCK_EX);
    return $lock;
}
sub in_flight { ($_[0]->counts)[0] }
sub most { ($_[0]->counts)[1] }
sub reset_most {
    my ($self) = @_;
    my $lock = $self->locked or return;
    my ($now) = split ' ', RLTest::read_file("$self->{dir}/count");
    RLTest::write_file("$self->{dir}/count", "$now $now\n");
}

sub events {
    my ($self) = @_;
    return map { [ split ' ' ] } split /\n/, RLTest::read_file("$self->{dir}/events");
}

sub stop {
    my ($self) = @_;
    return unless $self->{pid};
    kill 'KILL', -$self->{pid};   # its process group: the server and the requests it holds
    waitpid($self->{pid}, 0);
    @running = grep { $_ != $self->{pid} } @running;
    delete $self->{pid};
}

END { kill 'KILL', map { -$_ } @running if @running }

1;
